// CPU views of device memory, for running CPU kernels as the simulated
// core's compute engine inside work items.
//
// An alias shares the device tensor's bytes (no copy) and has the same sizes,
// strides and offset. Tensors that share a device storage get aliases that
// share one CPU storage, so CPU kernels' overlap checks see the same aliasing
// as on the device. Building an alias reads only metadata: it is done on the
// host at launch time (so later metadata changes on the host, e.g. resize_,
// cannot affect queued work), and the bytes are touched only by the item.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <utility>
#include <vector>

namespace torch_neuronx {

class AliasSet {
 public:
  // Alias of a neuron tensor (undefined stays undefined).
  at::Tensor alias(const at::Tensor& t);
  // Device storages the aliases refer to; hold them until the item has run.
  std::vector<c10::Storage>& keepAlive() { return keep_alive_; }

 private:
  std::vector<std::pair<c10::StorageImpl*, c10::Storage>> cpu_storages_;
  std::vector<c10::Storage> keep_alive_;
};

}  // namespace torch_neuronx
