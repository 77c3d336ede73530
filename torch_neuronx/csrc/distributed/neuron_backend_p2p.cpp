// neuron_backend_*.cpp: one class, a file per concern (they sort together).
// This one: point to point (send, recv) and the coalescing block, which
// queues the sends and receives collected in it as one exchange
// (batch_isend_irecv).
#include <ATen/record_function.h>

#include "distributed/neuron_backend_impl.h"

namespace torch_neuronx {

using namespace backend_impl;

c10::intrusive_ptr<c10d::Work> NeuronBackend::send(
    std::vector<at::Tensor>& tensors, int dst, int tag) {
  checkSingle(tensors, "send");
  const auto device = bindDevice(tensors[0], "send");
  TORCH_CHECK(dst >= 0 && dst < size_ && dst != rank_,
              "neuron backend: send to invalid rank ", dst);
  at::Tensor d = contiguousOrCopy(tensors[0]);
  if (coalescing_) {
    pending_->ops.push_back({true, dst, ptr(d), nbytes(d), tag});
    pending_->tensors.push_back(d);
    return c10::make_intrusive<c10d::Work>();
  }
  const char* p = ptr(d);
  const size_t n = nbytes(d);
  return enqueue(
      "c10d::send", c10d::OpType::SEND, device, {d}, {},
      [=](Transport& c) { c.send(p, n, dst, tag); },
      CollectiveFacts{"send", Shape::kPointToPoint, double(n), -1,
                      d.scalar_type(), std::nullopt, -1, dst});
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::recv(
    std::vector<at::Tensor>& tensors, int src, int tag) {
  checkSingle(tensors, "recv");
  at::Tensor& t = tensors[0];
  const auto device = bindDevice(t, "recv");
  TORCH_CHECK(src >= 0 && src < size_ && src != rank_,
              "neuron backend: recv from invalid rank ", src);
  at::Tensor d = contiguousOrCopy(t);
  if (coalescing_) {
    TORCH_CHECK(d.is_same(t),
                "neuron backend: batched recv needs a "
                "contiguous tensor");
    pending_->ops.push_back({false, src, ptr(d), nbytes(d), tag});
    pending_->tensors.push_back(d);
    return c10::make_intrusive<c10d::Work>();
  }
  char* p = ptr(d);
  const size_t n = nbytes(d);
  return enqueue(
      "c10d::recv", c10d::OpType::RECV, device, {d}, {t},
      [=](Transport& c) { c.recv(p, n, src, tag); },
      CollectiveFacts{"recv", Shape::kPointToPoint, double(n), -1,
                      t.scalar_type(), std::nullopt, -1, src},
      copyBackIfStaged(t, d));
}

void NeuronBackend::startCoalescing() {
  coalescing_ = true;
  pending_ = std::make_unique<Pending>();
}

c10::intrusive_ptr<c10d::Work> NeuronBackend::endCoalescing() {
  coalescing_ = false;
  std::unique_ptr<Pending> p = std::move(pending_);
  pending_ = std::make_unique<Pending>();
  const c10::DeviceIndex device = boundOrCurrentDevice();
  // c10d ends the block from Python, not through an op: this host event is
  // what the profiler links the item to.
  RECORD_FUNCTION(
      p->ops.empty() ? "c10d::coalesced" : "c10d::batch_isend_irecv",
      std::vector<c10::IValue>());
  if (p->ops.empty()) {
    // Collectives in the block were queued as they came: the returned work
    // completes after the last of them.
    return enqueue(
        "c10d::coalesced", c10d::OpType::COALESCED, device, {}, {},
        [](Transport&) {}, CollectiveFacts::nothing("coalesced"));
  }
  auto ops = std::move(p->ops);
  std::vector<at::Tensor> outs;
  for (size_t i = 0; i < ops.size(); ++i)
    if (!ops[i].is_send) outs.push_back(p->tensors[i]);
  CollectiveFacts facts{"batch_isend_irecv", Shape::kPointToPoint};
  facts.p2p = &ops;
  return enqueue(
      "c10d::batch_isend_irecv", c10d::OpType::COALESCED, device, p->tensors,
      outs, [ops](Transport& c) { c.exchange(ops); }, facts);
}

}  // namespace torch_neuronx
