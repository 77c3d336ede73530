#include "core/storage.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/ScalarTypeToTypeMeta.h>
#include <c10/util/Exception.h>
#include <c10/util/strides.h>

#include <cstring>
#include <memory>

#include "core/caching_allocator.h"
#include "core/device.h"
#include "core/memory_history.h"
#include "core/stream.h"

namespace torch_neuronx {

at::Tensor emptyStrided(c10::IntArrayRef size, c10::IntArrayRef stride,
                        c10::ScalarType dtype, c10::DeviceIndex device) {
  if (device < 0) device = currentDevice();
  size_t nbytes =
      at::detail::computeStorageNbytes(size, stride, c10::elementSize(dtype));
  auto storage = c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), nbytes,
      cachingAllocator().allocateOn(device, nbytes), &cachingAllocator(),
      /*resizable=*/true);
  auto t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(size, stride);
  return t;
}

at::Tensor emptyContiguous(c10::IntArrayRef size, c10::ScalarType dtype,
                           c10::DeviceIndex device, c10::MemoryFormat format) {
  for (int64_t s : size)
    TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s,
                ": ", size);
  auto strides = c10::contiguous_strides(size);
  at::Tensor t = emptyStrided(size, strides, dtype, device);
  if (format != c10::MemoryFormat::Contiguous &&
      format != c10::MemoryFormat::Preserve)
    t.unsafeGetTensorImpl()->empty_tensor_restride(format);
  return t;
}

void resizeStorageBytes(c10::StorageImpl* storage, size_t nbytes) {
  TORCH_CHECK(storage->resizable(),
              "Trying to resize storage that is not resizable");
  size_t old_nbytes = storage->nbytes();
  if (nbytes == old_nbytes) return;
  AllocLabel label("storage_resize");
  c10::DeviceIndex device = storage->device().index();
  c10::DataPtr fresh = cachingAllocator().allocateOn(device, nbytes);
  size_t keep = std::min(old_nbytes, nbytes);
  auto old =
      std::make_shared<c10::DataPtr>(storage->set_data_ptr(std::move(fresh)));
  storage->set_nbytes(nbytes);
  void* dst = storage->mutable_data();
  if (keep > 0 && old->get() && dst) {
    // The old block stays alive inside the item until its bytes are copied.
    launch(
        device, "storage_resize",
        [old, dst, keep] { std::memcpy(dst, old->get(), keep); },
        neuron_rt::ItemKind::kCopy);
  } else if (old->get()) {
    // Freed now, as on CUDA (FSDP2 relies on resize_(0) lowering
    // memory_allocated at once). Reuse is stream-ordered: the block's own
    // stream runs its earlier readers before any later user; if the current
    // stream is another one, the allocator holds the block back until that
    // stream has passed this point.
    cachingAllocator().recordStream(*old, currentStream(device));
    old.reset();
  }
}

}  // namespace torch_neuronx
