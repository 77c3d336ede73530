// Meta mirrors of an op's arguments, at launch on the host: its output
// metadata comes from Meta kernels without touching device memory.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <utility>
#include <vector>

namespace torch_neuronx {

// One mirror storage per device storage, so that tensors sharing device
// memory get mirrors sharing one storage (aliasing stays visible).
class StorageMap {
 public:
  template <typename Make>
  const c10::Storage& get(const at::Tensor& t, Make&& make) {
    c10::StorageImpl* key = t.storage().unsafeGetStorageImpl();
    for (auto& [k, s] : storages_)
      if (k == key) return s;
    storages_.emplace_back(key, make(t));
    return storages_.back().second;
  }

 private:
  std::vector<std::pair<c10::StorageImpl*, c10::Storage>> storages_;
};

// Mirrors tensors as meta tensors with the same geometry. Arguments that
// share a device storage get mirrors that share one meta storage, so Meta
// kernels see the same aliasing (and views map back to their base).
class MetaMirror {
 public:
  at::Tensor operator()(const at::Tensor& t);

 private:
  StorageMap storages_;
};

}  // namespace torch_neuronx
