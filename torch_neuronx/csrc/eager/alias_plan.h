// CPU views of device memory, for running CPU kernels as the simulated
// core's compute engine inside work items.
//
// An alias shares the device tensor's bytes (no copy) and has the same sizes,
// strides and offset. Tensors that share a device storage get aliases that
// share one CPU storage, so CPU kernels' overlap checks see the same aliasing
// as on the device. An alias is described from metadata only, on the host at
// launch time (so later metadata changes on the host, e.g. resize_, cannot
// affect queued work); the bytes are touched only by the item.
//
// Aliases do not keep device memory alive: as on CUDA, a tensor freed while
// work using it is queued returns its memory at once, and stream order makes
// reuse safe (the next user of the block runs after the queued work). Work
// on other streams is covered by Tensor.record_stream.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>
#include <c10/util/SmallVector.h>

#include <optional>
#include <utility>
#include <vector>

namespace torch_neuronx {

// The aliases a work item will use, described on the host and built by the
// item itself when it runs.
//
// For the small ops of an eager program, building the aliases' TensorImpls
// and StorageImpls on the host, and destroying them there once the item is
// retired, was half of the host's cost per op. The host records a few words
// per tensor (data pointer, geometry, dtype) as of launch, and the device
// worker builds and drops the aliases — at every run of the item, so an item
// captured in a graph builds them again at each replay. This is the one way
// eager ops run CPU code over device memory (compiled programs' kernels take
// the device addresses directly).
class AliasPlan {
 public:
  using Built = c10::SmallVector<at::Tensor, 6>;

  // Records the alias of a neuron tensor (or an undefined tensor); returns
  // its index in build()'s result.
  int add(const at::Tensor& t);
  // Records a host tensor handed to the item as it is (a CPU scalar's copy).
  int keep(at::Tensor t);
  // On the device worker: the tensors, in the order they were recorded.
  // Aliases of one device storage share one CPU storage.
  Built build() const;

  // What the recorded tensors are (the profiler's work and traffic
  // estimate): their number, sizes and element size (0 for kept and
  // undefined ones).
  int count() const { return static_cast<int>(tensors_.size()); }
  c10::IntArrayRef sizesOf(int i) const { return tensors_[i].sizes; }
  c10::IntArrayRef stridesOf(int i) const { return tensors_[i].strides; }
  int64_t itemsizeOf(int i) const {
    return tensors_[i].storage >= 0 ? tensors_[i].dtype.itemsize() : 0;
  }

  // What the item computes on (op_item.h): where each recorded tensor lives.
  // storageOf: its index among the storages, -1 undefined, -2 a kept host
  // tensor.
  int storageOf(int i) const { return tensors_[i].storage; }
  int64_t offsetOf(int i) const { return tensors_[i].storage_offset; }
  caffe2::TypeMeta dtypeOf(int i) const { return tensors_[i].dtype; }
  const at::Tensor& keptOf(int i) const { return kept_[tensors_[i].kept]; }
  int storageCount() const { return static_cast<int>(storages_.size()); }
  void* storageData(int s) const { return storages_[s].data; }
  size_t storageBytes(int s) const { return storages_[s].nbytes; }

  // Whether the host still held storage `s` when the item was released
  // (noteHeldStorages): a fused pass's output that nothing reads afterwards
  // costs a Trainium no HBM traffic. Known only for items recorded while
  // adaptive eager was on; true otherwise.
  bool storageHeld(int s) const { return storages_[s].held; }
  void noteHeldStorages();

 private:
  struct StorageSpec {
    const c10::StorageImpl* key;  // identifies the storage (host side only)
    void* data;
    size_t nbytes;
    // Set while adaptive eager is on: tells whether the host still holds it.
    std::optional<c10::weak_intrusive_ptr<c10::StorageImpl>> watch;
    bool held = true;
  };
  struct TensorSpec {
    c10::SmallVector<int64_t, 5> sizes;
    c10::SmallVector<int64_t, 5> strides;
    int64_t storage_offset = 0;
    caffe2::TypeMeta dtype;
    int storage = -1;  // index in storages_; -1: undefined; -2: kept
    int kept = -1;     // index in kept_
    bool conj = false;
    bool neg = false;
  };
  c10::SmallVector<StorageSpec, 4> storages_;
  c10::SmallVector<TensorSpec, 4> tensors_;
  std::vector<at::Tensor> kept_;
};

}  // namespace torch_neuronx
