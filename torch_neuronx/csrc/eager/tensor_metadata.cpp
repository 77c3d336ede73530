#include "eager/tensor_metadata.h"

#include <ATen/EmptyTensor.h>
#include <c10/util/Exception.h>
#include <c10/util/strides.h>

#include "core/caching_allocator.h"
#include "core/device.h"
#include "core/memory_history.h"
#include "core/storage.h"

namespace torch_neuronx {
namespace {

c10::DeviceIndex indexOf(std::optional<c10::Device> device) {
  if (device && device->has_index()) return device->index();
  return currentDevice();
}

// Grows the storage if the tensor's geometry needs more bytes than it has.
void ensureStorageFits(at::Tensor& self) {
  size_t needed = at::detail::computeStorageNbytes(self.sizes(), self.strides(),
                                                   self.dtype().itemsize(),
                                                   self.storage_offset());
  c10::StorageImpl* s = self.storage().unsafeGetStorageImpl();
  if (needed > s->nbytes()) resizeStorageBytes(s, needed);
}

}  // namespace

at::Tensor emptyMemoryFormat(c10::IntArrayRef size,
                             std::optional<c10::ScalarType> dtype,
                             std::optional<c10::Layout> layout,
                             std::optional<c10::Device> device,
                             std::optional<bool> pin_memory,
                             std::optional<c10::MemoryFormat> memory_format) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided,
              "neuron supports only strided tensors, got layout ", *layout);
  // pin_memory asks for page-locked host memory: meaningless for device
  // memory, and ignored for it (TorchNeuron's rule; torch.scalar_tensor and
  // other factories pass it through to empty).
  (void)pin_memory;
  AllocLabel label("aten::empty");
  return emptyContiguous(
      size, dtype.value_or(c10::get_default_dtype_as_scalartype()),
      indexOf(device), memory_format.value_or(c10::MemoryFormat::Contiguous));
}

at::Tensor emptyStridedOp(c10::IntArrayRef size, c10::IntArrayRef stride,
                          std::optional<c10::ScalarType> dtype,
                          std::optional<c10::Layout> layout,
                          std::optional<c10::Device> device,
                          std::optional<bool> pin_memory) {
  TORCH_CHECK(layout.value_or(c10::kStrided) == c10::kStrided,
              "neuron supports only strided tensors, got layout ", *layout);
  (void)pin_memory;  // ignored for device memory (emptyMemoryFormat)
  for (int64_t s : size)
    TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s,
                ": ", size);
  AllocLabel label("aten::empty_strided");
  return emptyStrided(size, stride,
                      dtype.value_or(c10::get_default_dtype_as_scalartype()),
                      indexOf(device));
}

const at::Tensor& resizeOp(const at::Tensor& self, c10::IntArrayRef size,
                           std::optional<c10::MemoryFormat> memory_format) {
  for (int64_t s : size)
    TORCH_CHECK(s >= 0, "Trying to create tensor with negative dimension ", s,
                ": ", size);
  auto* impl = self.unsafeGetTensorImpl();
  if (self.sizes() != size) {
    impl->set_sizes_contiguous(size);
  }
  if (memory_format && *memory_format != c10::MemoryFormat::Preserve)
    impl->empty_tensor_restride(*memory_format);
  at::Tensor t = self;
  ensureStorageFits(t);
  return self;
}

at::Tensor& setStorageOffset(at::Tensor& self, c10::Storage source,
                             int64_t storage_offset, c10::IntArrayRef size,
                             c10::IntArrayRef stride) {
  TORCH_CHECK(
      source.device().type() == c10::DeviceType::PrivateUse1 ||
          source.nbytes() == 0,
      "Attempted to set the storage of a neuron tensor to a storage on ",
      source.device());
  TORCH_CHECK(storage_offset >= 0, "Tensor: invalid storage offset ",
              storage_offset);
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(storage_offset);
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
  } else {
    TORCH_CHECK(size.size() == stride.size(), "set_: size and stride have ",
                "different lengths");
    impl->set_sizes_and_strides(size, stride);
  }
  ensureStorageFits(self);
  return self;
}

at::Tensor& setStorage(at::Tensor& self, c10::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return setStorageOffset(self, std::move(source), 0, {n}, {});
}

at::Tensor& setTensor(at::Tensor& self, const at::Tensor& source) {
  if (self.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) return self;
  return setStorageOffset(self, source.storage(), source.storage_offset(),
                          source.sizes(), source.strides());
}

at::Tensor& setEmpty(at::Tensor& self) {
  c10::DeviceIndex d = self.device().index();
  c10::Storage s(c10::Storage::use_byte_size_t(), 0,
                 cachingAllocator().allocateOn(d, 0), &cachingAllocator(),
                 /*resizable=*/true);
  return setStorageOffset(self, std::move(s), 0, {0}, {});
}

bool isSetTo(const at::Tensor& self, const at::Tensor& tensor) {
  return self.storage().is_alias_of(tensor.storage()) &&
         self.storage_offset() == tensor.storage_offset() &&
         self.sizes() == tensor.sizes() && self.strides() == tensor.strides();
}

void recordStreamOp(at::Tensor& self, c10::Stream stream) {
  cachingAllocator().recordStream(self.storage().data_ptr(), stream);
}

}  // namespace torch_neuronx
