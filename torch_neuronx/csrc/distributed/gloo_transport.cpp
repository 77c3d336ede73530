// The transport of a group that spans hosts: gloo on host views of device
// memory. Reductions gloo lacks are composed: AVG is a sum then a division,
// PREMUL_SUM a multiplication then a sum, bool reductions run on bytes
// (MAX for SUM/OR, MIN for PRODUCT/AND), float16/bfloat16 are reduced in
// float32 and rounded once, as the shared-memory communicator does, and
// int16 in int32.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstring>

#include "distributed/comm_types.h"
#include "distributed/transport.h"

namespace torch_neuronx {
namespace {

// A CPU tensor over `count` elements at `p` (device memory is host memory).
at::Tensor view(const void* p, size_t count, at::ScalarType t) {
  return at::from_blob(const_cast<void*>(p), {static_cast<int64_t>(count)},
                       at::TensorOptions().dtype(t));
}

class GlooTransport final : public Transport {
 public:
  GlooTransport(c10::intrusive_ptr<c10d::Backend> gloo, int rank, int size)
      : gloo_(std::move(gloo)), rank_(rank), size_(size) {}

  void allReduce(const void* in, void* out, size_t count, coll::DataType dtype,
                 coll::ReduceOp op, double factor) override {
    const at::ScalarType st = scalarTypeOf(dtype);
    at::Tensor dst = view(out, count, st);
    if (in != out) dst.copy_(view(in, count, st));
    if (count == 0) return;
    if (dtype == coll::DataType::kBool) {
      at::Tensor bytes = view(out, count, at::kByte);
      c10d::ReduceOp g = c10d::ReduceOp::MAX;
      if (op == coll::ReduceOp::kProduct || op == coll::ReduceOp::kMin ||
          op == coll::ReduceOp::kBand)
        g = c10d::ReduceOp::MIN;
      else if (op == coll::ReduceOp::kBxor)
        g = c10d::ReduceOp::BXOR;
      run(bytes, g);
      return;
    }
    // Gloo lacks int16; int32 gives the same wrapped result once narrowed.
    const bool low = st == at::kHalf || st == at::kBFloat16;
    const bool narrow = st == at::kShort;
    at::Tensor work =
        low ? dst.to(at::kFloat) : (narrow ? dst.to(at::kInt) : dst);
    c10d::ReduceOp g = c10d::ReduceOp::SUM;
    switch (op) {
      case coll::ReduceOp::kSum:
        break;
      case coll::ReduceOp::kAvg:
        break;
      case coll::ReduceOp::kPremulSum:
        work.mul_(factor);
        break;
      case coll::ReduceOp::kProduct:
        g = c10d::ReduceOp::PRODUCT;
        break;
      case coll::ReduceOp::kMin:
        g = c10d::ReduceOp::MIN;
        break;
      case coll::ReduceOp::kMax:
        g = c10d::ReduceOp::MAX;
        break;
      case coll::ReduceOp::kBand:
        g = c10d::ReduceOp::BAND;
        break;
      case coll::ReduceOp::kBor:
        g = c10d::ReduceOp::BOR;
        break;
      case coll::ReduceOp::kBxor:
        g = c10d::ReduceOp::BXOR;
        break;
    }
    run(work, g);
    const bool avg = op == coll::ReduceOp::kAvg;
    if (low) {
      if (avg) divideForAverage(work, size_);
      dst.copy_(work);
    } else {
      // The int32 sum of int16s wraps in int16 before AVG divides it, as the
      // shared-memory communicator's does.
      if (narrow) dst.copy_(work);
      if (avg) divideForAverage(dst, size_);
    }
  }

  void reduce(const void* in, void* out, size_t count, coll::DataType dtype,
              coll::ReduceOp op, int root, double factor) override {
    // All ranks reduce into a scratch copy; the root keeps the result.
    at::Tensor scratch = view(in, count, scalarTypeOf(dtype)).clone();
    allReduce(scratch.data_ptr(), scratch.data_ptr(), count, dtype, op, factor);
    if (rank_ == root) view(out, count, scalarTypeOf(dtype)).copy_(scratch);
  }

  void broadcast(void* buf, size_t count, coll::DataType dtype,
                 int root) override {
    std::vector<at::Tensor> v{
        view(buf, count * coll::dtypeSize(dtype), at::kByte)};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    gloo_->broadcast(v, o)->wait();
  }

  void allGather(const void* in, void* out, size_t count,
                 coll::DataType dtype) override {
    const size_t bytes = count * coll::dtypeSize(dtype);
    std::vector<at::Tensor> in_v{view(in, bytes, at::kByte)};
    std::vector<std::vector<at::Tensor>> out_v(1);
    at::Tensor all = view(out, bytes * size_, at::kByte);
    for (int k = 0; k < size_; ++k)
      out_v[0].push_back(all.narrow(0, k * bytes, bytes));
    gloo_->allgather(out_v, in_v)->wait();
  }

  void gatherV(const void* in, void* out, const std::vector<size_t>& counts,
               coll::DataType dtype, int root) override {
    const size_t esize = coll::dtypeSize(dtype);
    std::vector<at::Tensor> in_v{view(in, counts[rank_] * esize, at::kByte)};
    std::vector<std::vector<at::Tensor>> out_v;
    if (rank_ == root) {
      out_v.emplace_back();
      size_t off = 0;
      for (size_t c : counts) {
        out_v[0].push_back(
            view(static_cast<char*>(out) + off, c * esize, at::kByte));
        off += c * esize;
      }
    }
    c10d::GatherOptions o;
    o.rootRank = root;
    gloo_->gather(out_v, in_v, o)->wait();
  }

  void scatterV(const void* in, void* out, const std::vector<size_t>& counts,
                coll::DataType dtype, int root) override {
    const size_t esize = coll::dtypeSize(dtype);
    std::vector<at::Tensor> out_v{view(out, counts[rank_] * esize, at::kByte)};
    std::vector<std::vector<at::Tensor>> in_v;
    if (rank_ == root) {
      in_v.emplace_back();
      size_t off = 0;
      for (size_t c : counts) {
        in_v[0].push_back(
            view(static_cast<const char*>(in) + off, c * esize, at::kByte));
        off += c * esize;
      }
    }
    c10d::ScatterOptions o;
    o.rootRank = root;
    gloo_->scatter(out_v, in_v, o)->wait();
  }

  void reduceScatter(const void* in, void* out, size_t count,
                     coll::DataType dtype, coll::ReduceOp op,
                     double factor) override {
    const at::ScalarType st = scalarTypeOf(dtype);
    at::Tensor all = view(in, count * size_, st).clone();
    allReduce(all.data_ptr(), all.data_ptr(), count * size_, dtype, op, factor);
    view(out, count, st).copy_(all.narrow(0, rank_ * count, count));
  }

  void allToAllV(const void* in, const std::vector<size_t>& send_bytes,
                 const std::vector<size_t>& send_offsets, void* out,
                 const std::vector<size_t>& recv_bytes,
                 const std::vector<size_t>& recv_offsets) override {
    size_t in_total = 0, out_total = 0;
    std::vector<int64_t> in_splits, out_splits;
    for (int k = 0; k < size_; ++k) {
      TORCH_CHECK(send_offsets[k] == in_total && recv_offsets[k] == out_total,
                  "neuron backend: all_to_all over gloo needs packed blocks");
      in_total += send_bytes[k];
      out_total += recv_bytes[k];
      in_splits.push_back(static_cast<int64_t>(send_bytes[k]));
      out_splits.push_back(static_cast<int64_t>(recv_bytes[k]));
    }
    at::Tensor in_t = view(in, in_total, at::kByte);
    at::Tensor out_t = view(out, out_total, at::kByte);
    gloo_->alltoall_base(out_t, in_t, out_splits, in_splits)->wait();
  }

  void send(const void* buf, size_t bytes, int dst, int tag) override {
    std::vector<at::Tensor> v{view(buf, bytes, at::kByte)};
    gloo_->send(v, dst, tag)->wait();
  }

  void recv(void* buf, size_t bytes, int src, int tag) override {
    std::vector<at::Tensor> v{view(buf, bytes, at::kByte)};
    gloo_->recv(v, src, tag)->wait();
  }

  void exchange(const std::vector<P2POp>& ops) override {
    // Everything posted first, then waited for: no order can deadlock.
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (const P2POp& op : ops) {
      std::vector<at::Tensor> v{view(op.buf, op.bytes, at::kByte)};
      works.push_back(op.is_send ? gloo_->send(v, op.peer, op.tag)
                                 : gloo_->recv(v, op.peer, op.tag));
    }
    for (auto& w : works) w->wait();
  }

  void barrier() override { gloo_->barrier()->wait(); }

  const char* kind() const override { return "gloo"; }
  void abort(const std::string&) override { gloo_->abort(); }
  void setTimeout(std::chrono::milliseconds timeout) override {
    gloo_->setTimeout(timeout);
  }

 private:
  void run(at::Tensor& t, c10d::ReduceOp op) {
    std::vector<at::Tensor> v{t};
    c10d::AllreduceOptions o;
    o.reduceOp = op;
    gloo_->allreduce(v, o)->wait();
  }

  c10::intrusive_ptr<c10d::Backend> gloo_;
  int rank_;
  int size_;
};

}  // namespace

std::unique_ptr<Transport> glooTransport(c10::intrusive_ptr<c10d::Backend> gloo,
                                         int rank, int size) {
  return std::make_unique<GlooTransport>(std::move(gloo), rank, size);
}

}  // namespace torch_neuronx
