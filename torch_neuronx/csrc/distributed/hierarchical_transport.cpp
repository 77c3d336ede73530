// The transport of a group that spans hosts and has several ranks on one of
// them: ranks of a host talk through their shared-memory communicator, and
// only one rank per host (its "leader", the host's lowest rank) talks to the
// other hosts, through gloo. Reductions, broadcasts and barriers run in
// those two levels (the bulk of the data never leaves shared memory); the
// collectives that move distinct data between every pair of ranks
// (all_gather, gather, scatter, all_to_all, send/recv) go through a gloo
// group of all ranks.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>

#include "distributed/comm_types.h"
#include "distributed/transport.h"

namespace torch_neuronx {
namespace {

class HierarchicalTransport final : public Transport {
 public:
  HierarchicalTransport(std::unique_ptr<Transport> local,
                        std::unique_ptr<Transport> leaders,
                        std::unique_ptr<Transport> all,
                        std::vector<int> host_of_rank, int rank)
      : local_(std::move(local)),
        leaders_(std::move(leaders)),
        all_(std::move(all)),
        host_of_rank_(std::move(host_of_rank)),
        rank_(rank),
        size_(static_cast<int>(host_of_rank_.size())) {
    int hosts = 0;
    for (int h : host_of_rank_) hosts = std::max(hosts, h + 1);
    leader_of_host_.assign(hosts, -1);
    for (int r = 0; r < size_; ++r) {
      const int h = host_of_rank_[r];
      if (leader_of_host_[h] < 0) leader_of_host_[h] = r;
    }
    TORCH_CHECK(isLeader() == (leaders_ != nullptr),
                "neuron backend: a host's leader needs the leaders' group");
  }

  void allReduce(const void* in, void* out, size_t count, coll::DataType dtype,
                 coll::ReduceOp op, double factor) override {
    // AVG: a sum within the host and between the leaders, divided once by
    // the leader. PREMUL_SUM: scaled within the host, then summed (or scaled
    // by the leaders, for a rank alone on its host).
    coll::ReduceOp local_op = op, leader_op = op;
    double leader_factor = factor;
    if (op == coll::ReduceOp::kAvg) {
      local_op = leader_op = coll::ReduceOp::kSum;
    } else if (op == coll::ReduceOp::kPremulSum && local_) {
      leader_op = coll::ReduceOp::kSum;
      leader_factor = 1.0;
    }
    if (local_)
      local_->reduce(in, out, count, dtype, local_op, /*root=*/0, factor);
    else if (in != out)
      std::memcpy(out, in, count * coll::dtypeSize(dtype));
    if (leaders_) {
      leaders_->allReduce(out, out, count, dtype, leader_op, leader_factor);
      if (op == coll::ReduceOp::kAvg)
        divideForAverage(
            at::from_blob(out, {static_cast<int64_t>(count)},
                          at::TensorOptions().dtype(scalarTypeOf(dtype))),
            size_);
    }
    if (local_) local_->broadcast(out, count, dtype, /*root=*/0);
  }

  void reduce(const void* in, void* out, size_t count, coll::DataType dtype,
              coll::ReduceOp op, int root, double factor) override {
    // Every rank reduces into a scratch buffer; the root keeps the result.
    at::Tensor scratch =
        at::empty({static_cast<int64_t>(count * coll::dtypeSize(dtype))},
                  at::TensorOptions().dtype(at::kByte));
    allReduce(in, scratch.data_ptr(), count, dtype, op, factor);
    if (rank_ == root)
      std::memcpy(out, scratch.data_ptr(), count * coll::dtypeSize(dtype));
  }

  void broadcast(void* buf, size_t count, coll::DataType dtype,
                 int root) override {
    // The root's host first (so that its leader has the data), then the
    // leaders, then every other host from its leader.
    const int root_host = host_of_rank_[root];
    const bool on_root_host = host_of_rank_[rank_] == root_host;
    if (on_root_host && local_)
      local_->broadcast(buf, count, dtype, localRank(root));
    if (leaders_) leaders_->broadcast(buf, count, dtype, /*root=*/root_host);
    if (!on_root_host && local_) local_->broadcast(buf, count, dtype, 0);
  }

  void reduceScatter(const void* in, void* out, size_t count,
                     coll::DataType dtype, coll::ReduceOp op,
                     double factor) override {
    // The whole reduction, of which each rank keeps its block.
    const size_t esize = coll::dtypeSize(dtype);
    at::Tensor scratch =
        at::empty({static_cast<int64_t>(count * size_ * esize)},
                  at::TensorOptions().dtype(at::kByte));
    allReduce(in, scratch.data_ptr(), count * size_, dtype, op, factor);
    std::memcpy(out,
                static_cast<char*>(scratch.data_ptr()) + rank_ * count * esize,
                count * esize);
  }

  void allGather(const void* in, void* out, size_t count,
                 coll::DataType dtype) override {
    all_->allGather(in, out, count, dtype);
  }
  void gatherV(const void* in, void* out, const std::vector<size_t>& counts,
               coll::DataType dtype, int root) override {
    all_->gatherV(in, out, counts, dtype, root);
  }
  void scatterV(const void* in, void* out, const std::vector<size_t>& counts,
                coll::DataType dtype, int root) override {
    all_->scatterV(in, out, counts, dtype, root);
  }
  void allToAllV(const void* in, const std::vector<size_t>& send_bytes,
                 const std::vector<size_t>& send_offsets, void* out,
                 const std::vector<size_t>& recv_bytes,
                 const std::vector<size_t>& recv_offsets) override {
    all_->allToAllV(in, send_bytes, send_offsets, out, recv_bytes,
                    recv_offsets);
  }
  void send(const void* buf, size_t bytes, int dst, int tag) override {
    all_->send(buf, bytes, dst, tag);
  }
  void recv(void* buf, size_t bytes, int src, int tag) override {
    all_->recv(buf, bytes, src, tag);
  }
  void exchange(const std::vector<P2POp>& ops) override { all_->exchange(ops); }

  void barrier() override {
    // Everyone on a host has arrived, then every host, then everyone leaves.
    if (local_) local_->barrier();
    if (leaders_) leaders_->barrier();
    if (local_) local_->barrier();
  }

  const char* kind() const override { return "hierarchical"; }
  void setTimeout(std::chrono::milliseconds timeout) override {
    if (local_) local_->setTimeout(timeout);
    if (leaders_) leaders_->setTimeout(timeout);
    all_->setTimeout(timeout);
  }
  void abort(const std::string& reason) override {
    if (local_) local_->abort(reason);
    if (leaders_) leaders_->abort(reason);
    all_->abort(reason);
  }

 private:
  bool isLeader() const {
    return leader_of_host_[host_of_rank_[rank_]] == rank_;
  }
  // `r`'s rank among the ranks of its host.
  int localRank(int r) const {
    int k = 0;
    for (int q = 0; q < r; ++q) k += host_of_rank_[q] == host_of_rank_[r];
    return k;
  }

  std::unique_ptr<Transport> local_;    // null when alone on the host
  std::unique_ptr<Transport> leaders_;  // null unless the host's leader
  std::unique_ptr<Transport> all_;
  std::vector<int> host_of_rank_;
  std::vector<int> leader_of_host_;
  int rank_;
  int size_;
};

}  // namespace

std::unique_ptr<Transport> hierarchicalTransport(
    std::unique_ptr<Transport> local, std::unique_ptr<Transport> leaders,
    std::unique_ptr<Transport> all, std::vector<int> host_of_rank, int rank) {
  return std::make_unique<HierarchicalTransport>(
      std::move(local), std::move(leaders), std::move(all),
      std::move(host_of_rank), rank);
}

}  // namespace torch_neuronx
