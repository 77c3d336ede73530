// Mirrors of neuron tensors over another storage: CPU aliases of device
// memory (eager/cpu_alias.h) and meta mirrors for Meta kernels
// (eager/op_args.h) are both built from these two pieces.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKey.h>
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

// A tensor over `storage` with `like`'s dtype, geometry and lazy conj/neg
// bits, for dispatch key `key`. An inference tensor: no version counter to
// allocate, no autograd keys.
at::Tensor tensorOver(const c10::Storage& storage, c10::DispatchKey key,
                      const at::Tensor& like);

}  // namespace torch_neuronx
