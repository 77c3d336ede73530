// CPU views of device memory, for running CPU kernels as the simulated
// core's compute engine inside work items.
//
// An alias shares the device tensor's bytes (no copy) and has the same sizes,
// strides and offset. Tensors that share a device storage get aliases that
// share one CPU storage, so CPU kernels' overlap checks see the same aliasing
// as on the device. Building an alias reads only metadata: it is done on the
// host at launch time (so later metadata changes on the host, e.g. resize_,
// cannot affect queued work), and the bytes are touched only by the item.
//
// Aliases do not keep device memory alive: as on CUDA, a tensor freed while
// work using it is queued returns its memory at once, and stream order makes
// reuse safe (the next user of the block runs after the queued work). Work
// on other streams is covered by Tensor.record_stream.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <utility>
#include <vector>

#include "aten/tensor_mirror.h"

namespace torch_neuronx {

class AliasSet {
 public:
  // Alias of a neuron tensor (undefined stays undefined).
  at::Tensor alias(const at::Tensor& t);

 private:
  StorageMap cpu_storages_;
};

}  // namespace torch_neuronx
