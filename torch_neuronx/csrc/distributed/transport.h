// What a collective's work item talks to. A group whose ranks share a host
// uses the runtime's shared-memory communicator; a group that spans hosts
// goes through gloo (torch's own ProcessGroupGloo, made by the Python layer)
// on host views of the device memory — the simulated device's memory is
// host memory, so these views are the staging buffers, without a copy — and,
// when a host has several of its ranks, through both: shared memory within
// a host, gloo between hosts.
#pragma once

#include <neuron_runtime/collectives/communicator.h>

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <vector>

namespace torch_neuronx {

namespace coll = neuron_rt::collectives;

class Transport {
 public:
  using P2POp = coll::Communicator::P2POp;
  virtual ~Transport() = default;

  // The Communicator's API (counts in elements of `dtype`; see
  // neuron_runtime/collectives/communicator.h).
  virtual void allReduce(const void* in, void* out, size_t count,
                         coll::DataType dtype, coll::ReduceOp op,
                         double factor) = 0;
  virtual void reduce(const void* in, void* out, size_t count,
                      coll::DataType dtype, coll::ReduceOp op, int root,
                      double factor) = 0;
  virtual void broadcast(void* buf, size_t count, coll::DataType dtype,
                         int root) = 0;
  virtual void allGather(const void* in, void* out, size_t count,
                         coll::DataType dtype) = 0;
  virtual void gatherV(const void* in, void* out,
                       const std::vector<size_t>& counts, coll::DataType dtype,
                       int root) = 0;
  virtual void scatterV(const void* in, void* out,
                        const std::vector<size_t>& counts, coll::DataType dtype,
                        int root) = 0;
  virtual void reduceScatter(const void* in, void* out, size_t count,
                             coll::DataType dtype, coll::ReduceOp op,
                             double factor) = 0;
  virtual void allToAllV(const void* in, const std::vector<size_t>& send_bytes,
                         const std::vector<size_t>& send_offsets, void* out,
                         const std::vector<size_t>& recv_bytes,
                         const std::vector<size_t>& recv_offsets) = 0;
  virtual void send(const void* buf, size_t bytes, int dst, int tag) = 0;
  virtual void recv(void* buf, size_t bytes, int src, int tag) = 0;
  virtual void exchange(const std::vector<P2POp>& ops) = 0;
  virtual void barrier() = 0;
  virtual void abort(const std::string& reason) = 0;
  // The bound on each later collective (dist.set_timeout).
  virtual void setTimeout(std::chrono::milliseconds timeout) = 0;
  // "shared_memory", "gloo" or "hierarchical" (shown to Python).
  virtual const char* kind() const = 0;
};

std::unique_ptr<Transport> sharedMemoryTransport(
    std::unique_ptr<coll::Communicator> comm);

// `gloo`: a ProcessGroupGloo of the same ranks.
std::unique_ptr<Transport> glooTransport(c10::intrusive_ptr<c10d::Backend> gloo,
                                         int rank, int size);

// A group spanning hosts with several ranks on a host: `local` connects the
// ranks of this rank's host (null if it is alone there), `leaders` the
// lowest rank of every host (null unless this rank is its host's), `all`
// every rank. `host_of_rank[r]` numbers rank r's host, hosts in the order
// of their lowest rank.
std::unique_ptr<Transport> hierarchicalTransport(
    std::unique_ptr<Transport> local, std::unique_ptr<Transport> leaders,
    std::unique_ptr<Transport> all, std::vector<int> host_of_rank, int rank);

}  // namespace torch_neuronx
