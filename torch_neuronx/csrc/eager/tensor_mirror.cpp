#include "eager/tensor_mirror.h"

#include <c10/core/InferenceMode.h>
#include <c10/core/TensorImpl.h>

namespace torch_neuronx {

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

}  // namespace torch_neuronx
