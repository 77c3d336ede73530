// The `neuron` process-group backend: a c10d::Backend whose collectives run
// on neuron tensors as work items, the way NCCL runs them on CUDA streams.
//
// Each collective is queued on the backend's communication stream (one per
// device, from the device's stream pool), after everything already queued on
// the caller's current stream (an event), so it is ordered with the compute
// around it and overlaps with later compute. The item calls the runtime's
// host-local communicator (neuron_runtime/collectives/communicator.h) on raw
// device memory. Tensors it uses are recorded on the communication stream,
// so the caching allocator does not reuse their memory before it is done.
// Inputs that are not contiguous are made so on the caller's stream; outputs
// that are not are written through a contiguous buffer and copied back on
// the communication stream.
//
// A process binds the backend to one device — that of the first tensor it
// passes (torch.neuron.set_device(LOCAL_RANK) first, as with CUDA); tensors
// on another device are refused with a message saying so.
#pragma once

#include <c10/core/Stream.h>
#include <neuron_runtime/collectives/communicator.h>
#include <neuron_runtime/trainium_estimate.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <utility>
#include <vector>

namespace torch_neuronx {

class Transport;
namespace coll = neuron_rt::collectives;

// Outputs a collective writes through a contiguous buffer: (output, buffer)
// pairs, copied on the communication stream after the collective.
using CopyBacks = std::vector<std::pair<at::Tensor, at::Tensor>>;

// A group whose ranks are on several hosts (made by the Python layer, which
// creates the gloo groups; see transport.h).
struct HostSpan {
  c10::intrusive_ptr<c10d::Backend> all;      // gloo over every rank
  c10::intrusive_ptr<c10d::Backend> leaders;  // gloo over each host's lowest
                                              // rank; only on those ranks
  std::vector<int> host_of_rank;  // hosts numbered by their lowest rank
  bool spansHosts() const { return static_cast<bool>(all); }
};

// What the profiler is told of a collective's work item: a few scalars each
// call fills, made into the item's note (strings and all) only while a
// profile records device items.
struct CollectiveFacts {
  const char* op = "";  // "all_reduce", "send", ... (the detail's op=)
  neuron_rt::CollectiveShape shape = neuron_rt::CollectiveShape::kAllReduce;
  double bytes = 0;            // tensor bytes moved on this rank
  double estimate_bytes = -1;  // for the estimate, if not `bytes`
  std::optional<at::ScalarType> dtype;
  std::optional<c10d::ReduceOp::RedOpType> reduce_op;
  int root = -1;  // group rank of a rooted collective's root
  int peer = -1;  // group rank of a send's or recv's peer
  // batch_isend_irecv: its sends and receives (peers and bytes).
  const std::vector<coll::Communicator::P2POp>* p2p = nullptr;
  bool moves_nothing = false;  // estimated at 0
  // An item that moves no data (the end of a coalesced block).
  static CollectiveFacts nothing(const char* op) {
    CollectiveFacts f;
    f.op = op;
    f.shape = neuron_rt::CollectiveShape::kBarrier;
    f.moves_nothing = true;
    return f;
  }
};

class NeuronBackend final : public c10d::Backend {
 public:
  // Joins the communicator of this group (its name is agreed through
  // `store`); returns when every rank has joined, or throws
  // DistBackendError after `timeout`.
  // `hosts`: how a group spanning hosts is laid out; default for a group on
  // one host.
  // `global_ranks`: the group's ranks in the default group, by group rank
  // (empty: the default group itself); the profiler names peers by them.
  NeuronBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                int size, std::chrono::milliseconds timeout,
                std::string group_name, HostSpan hosts = {},
                std::vector<int> global_ranks = {});
  ~NeuronBackend() override;

  const std::string getBackendName() const override { return "neuron"; }
  // How the group's data moves: "shared_memory", "gloo" or "hierarchical".
  std::string transportKind() const;
  bool supportsCoalescing() const override { return true; }
  // DeviceMesh and dist.split_group make sub-groups by splitting (a group
  // bound to a device, init_process_group(device_id=...)).
  bool supportsSplitting() const override { return true; }
  // The options this group was made with (backend, timeout, name, its ranks
  // in the default group): c10d's splitGroup starts a child's options from
  // them (torch 2.14 asks every backend it splits; 2.13 only when the caller
  // gave none). A fresh object each call: split() may change what it gets.
  c10::intrusive_ptr<Options> getBackendOptions() override;
  // dist.set_timeout (torch 2.14; TorchTitan calls it after the first step):
  // the bound on every later collective of this group, as gloo applies it.
  void setTimeout(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10d::Backend> split(
      const c10::intrusive_ptr<c10d::Store>& store,
      const std::vector<int>& ranks,
      const c10::intrusive_ptr<Options>& opts) override;

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input,
      std::vector<int64_t>& output_split_sizes,
      std::vector<int64_t>& input_split_sizes,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts) override;

  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_; }
  void abort() override;
  void shutdown() override;

 private:
  struct Pending;  // send/recv collected between start/endCoalescing

  c10::DeviceIndex bindDevice(const at::Tensor& t, const char* what);
  // An input and an output of one dtype, both on the bound device.
  c10::DeviceIndex bindInputOutput(const at::Tensor& input,
                                   const at::Tensor& output, const char* what);
  c10::DeviceIndex boundOrCurrentDevice() const;
  c10::Stream commStream(c10::DeviceIndex device);
  std::string describe(const char* collective, uint64_t seq) const;
  // Queues `body(communicator)` on the communication stream of `device`
  // after the current stream's work, then the copy-backs; `used` are
  // recorded on that stream. The work completes after the copy-backs.
  // `facts`: what the profiler is told of the item.
  template <typename Body>
  c10::intrusive_ptr<c10d::Work> enqueue(
      const char* label, c10d::OpType type, c10::DeviceIndex device,
      const std::vector<at::Tensor>& used, std::vector<at::Tensor> outputs,
      Body body, const CollectiveFacts& facts, CopyBacks copies = {},
      bool blocks_host = false);
  // Describes the collective `seq` as the next item this thread queues.
  void noteCollective(const CollectiveFacts& facts, uint64_t seq) const;
  int globalRank(int group_rank) const;
  void drain();
  // The host layout and gloo groups of the sub-group `ranks` of a group
  // spanning hosts (empty when they are all on one host).
  HostSpan splitHosts(const c10::intrusive_ptr<c10d::Store>& store,
                      const std::vector<int>& ranks);

  int rank_;
  int size_;
  bool spans_hosts_ = false;
  // A group spanning hosts keeps its gloo group of all ranks and its host
  // layout, to split them.
  c10::intrusive_ptr<c10d::Backend> gloo_all_;
  std::map<std::vector<int>, int> split_counts_;  // splits made, by ranks
  std::vector<int> host_of_rank_;
  std::string group_name_;
  std::vector<int> global_ranks_;  // empty: the default group
  std::chrono::milliseconds timeout_;
  c10::intrusive_ptr<c10d::Store> store_;  // where splits meet
  std::unique_ptr<Transport> transport_;
  c10::DeviceIndex device_ = -1;
  std::optional<c10::Stream> comm_stream_;
  uint64_t seq_ = 0;
  bool coalescing_ = false;
  std::unique_ptr<Pending> pending_;
};

}  // namespace torch_neuronx
