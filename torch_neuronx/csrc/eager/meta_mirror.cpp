#include "eager/meta_mirror.h"

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/TensorImpl.h>

#include <utility>

#include "eager/device_check.h"

namespace torch_neuronx {
namespace {

// A tensor over `storage` with `like`'s dtype, geometry and lazy conj/neg
// bits, for dispatch key `key`. An inference tensor: no version counter to
// allocate, no autograd keys.
at::Tensor tensorOver(const c10::Storage& storage, c10::DispatchKey key,
                      const at::Tensor& like) {
  c10::InferenceMode inference;
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::Storage(storage), c10::DispatchKeySet(key), like.dtype());
  impl->set_sizes_and_strides(like.sizes(), like.strides(),
                              like.storage_offset());
  // Lazy conjugation and negation are part of what the bytes mean.
  if (like.is_conj()) impl->_set_conj(true);
  if (like.is_neg()) impl->_set_neg(true);
  return at::Tensor(std::move(impl));
}

}  // namespace

at::Tensor MetaMirror::operator()(const at::Tensor& t) {
  if (!t.defined()) return t;
  if (!isNeuron(t)) {
    // A Python number (wrapped number) goes to the Meta kernel as it is:
    // Meta kernels take those beside meta tensors, and Python meta kernels
    // require them on the CPU. Other CPU scalars become 0-dim meta tensors,
    // which every Meta kernel accepts.
    if (t.unsafeGetTensorImpl()->is_wrapped_number()) return t;
    return at::empty({}, t.options().device(c10::kMeta));
  }
  const c10::Storage& meta = storages_.get(t, [](const at::Tensor& d) {
    return c10::Storage(c10::Storage::use_byte_size_t(), d.storage().nbytes(),
                        c10::GetAllocator(c10::kMeta), /*resizable=*/true);
  });
  return tensorOver(meta, c10::DispatchKey::Meta, t);
}

}  // namespace torch_neuronx
