// The transport of a group on one host: the runtime's communicator as it is.
#include "distributed/transport.h"

namespace torch_neuronx {
namespace {

class SharedMemoryTransport final : public Transport {
 public:
  explicit SharedMemoryTransport(std::unique_ptr<coll::Communicator> c)
      : c_(std::move(c)) {}
  void allReduce(const void* in, void* out, size_t count, coll::DataType dtype,
                 coll::ReduceOp op, double factor) override {
    c_->allReduce(in, out, count, dtype, op, factor);
  }
  void reduce(const void* in, void* out, size_t count, coll::DataType dtype,
              coll::ReduceOp op, int root, double factor) override {
    c_->reduce(in, out, count, dtype, op, root, factor);
  }
  void broadcast(void* buf, size_t count, coll::DataType dtype,
                 int root) override {
    c_->broadcast(buf, count, dtype, root);
  }
  void allGather(const void* in, void* out, size_t count,
                 coll::DataType dtype) override {
    c_->allGather(in, out, count, dtype);
  }
  void gatherV(const void* in, void* out, const std::vector<size_t>& counts,
               coll::DataType dtype, int root) override {
    c_->gatherV(in, out, counts, dtype, root);
  }
  void scatterV(const void* in, void* out, const std::vector<size_t>& counts,
                coll::DataType dtype, int root) override {
    c_->scatterV(in, out, counts, dtype, root);
  }
  void reduceScatter(const void* in, void* out, size_t count,
                     coll::DataType dtype, coll::ReduceOp op,
                     double factor) override {
    c_->reduceScatter(in, out, count, dtype, op, factor);
  }
  void allToAllV(const void* in, const std::vector<size_t>& send_bytes,
                 const std::vector<size_t>& send_offsets, void* out,
                 const std::vector<size_t>& recv_bytes,
                 const std::vector<size_t>& recv_offsets) override {
    c_->allToAllV(in, send_bytes, send_offsets, out, recv_bytes, recv_offsets);
  }
  void send(const void* buf, size_t bytes, int dst, int tag) override {
    c_->send(buf, bytes, dst, tag);
  }
  void recv(void* buf, size_t bytes, int src, int tag) override {
    c_->recv(buf, bytes, src, tag);
  }
  void exchange(const std::vector<P2POp>& ops) override { c_->exchange(ops); }
  void barrier() override { c_->barrier(); }
  const char* kind() const override { return "shared_memory"; }
  void abort(const std::string& reason) override { c_->abort(reason); }
  void setTimeout(std::chrono::milliseconds timeout) override {
    c_->setTimeout(timeout);
  }

 private:
  std::unique_ptr<coll::Communicator> c_;
};

}  // namespace

std::unique_ptr<Transport> sharedMemoryTransport(
    std::unique_ptr<coll::Communicator> comm) {
  return std::make_unique<SharedMemoryTransport>(std::move(comm));
}

}  // namespace torch_neuronx
