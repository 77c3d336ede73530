#include "aten/cpu_alias.h"

#include <c10/core/InferenceMode.h>
#include <c10/core/TensorImpl.h>

namespace torch_neuronx {
namespace {

void noDelete(void*) {}

}  // namespace

at::Tensor AliasSet::alias(const at::Tensor& t) {
  if (!t.defined()) return t;
  c10::StorageImpl* dev_storage = t.storage().unsafeGetStorageImpl();
  c10::Storage* cpu = nullptr;
  for (auto& [impl, storage] : cpu_storages_)
    if (impl == dev_storage) cpu = &storage;
  if (!cpu) {
    void* data = const_cast<void*>(t.storage().data());
    c10::Storage s(c10::Storage::use_byte_size_t(), t.storage().nbytes(),
                   c10::DataPtr(data, data, &noDelete, c10::Device(c10::kCPU)),
                   /*allocator=*/nullptr, /*resizable=*/false);
    cpu_storages_.emplace_back(dev_storage, std::move(s));
    cpu = &cpu_storages_.back().second;
  }
  // An inference tensor: no version counter to allocate, no autograd keys.
  c10::InferenceMode inference;
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::Storage(*cpu), c10::DispatchKeySet(c10::DispatchKey::CPU),
      t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  // Lazy conjugation and negation are part of what the bytes mean.
  if (t.is_conj()) impl->_set_conj(true);
  if (t.is_neg()) impl->_set_neg(true);
  return at::Tensor(std::move(impl));
}

}  // namespace torch_neuronx
