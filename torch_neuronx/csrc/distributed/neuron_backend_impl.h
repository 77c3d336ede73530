// neuron_backend_*.cpp: one class, a file per concern (they sort together),
// as the runtime's communicator is split. This one, private to them: the
// batched send/recv block, the helpers the collectives share, and enqueue,
// which every collective ends with (a template, so here: each collective's
// body is a lambda of its own type, queued without a std::function of its
// own).
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/stream.h"
#include "distributed/comm_types.h"
#include "distributed/neuron_backend.h"
#include "distributed/neuron_work.h"
#include "distributed/transport.h"

namespace torch_neuronx {

// Sends and receives collected between startCoalescing and endCoalescing,
// queued there as one exchange (batch_isend_irecv).
struct NeuronBackend::Pending {
  std::vector<coll::Communicator::P2POp> ops;
  std::vector<at::Tensor> tensors;
};

// In a namespace of their own: short names (ptr, nbytes) that other files of
// the library must not meet at link time.
namespace backend_impl {

// The collective patterns the estimate knows.
using Shape = neuron_rt::CollectiveShape;

[[noreturn]] void distError(const std::string& msg);

// `t` itself when contiguous, else a contiguous copy the collective works on.
inline at::Tensor contiguousOrCopy(const at::Tensor& t) {
  return t.is_contiguous() ? t : t.contiguous();
}

inline char* ptr(const at::Tensor& t) {
  return static_cast<char*>(t.data_ptr());
}

inline size_t nbytes(const at::Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}

// How a reduction sees `t`'s elements; DistBackendError for a dtype the
// communicator cannot reduce.
CommElement reducible(const at::Tensor& t);

// PREMUL_SUM's factor: a double, or a tensor read by the item (as float64,
// converted on the caller's stream before the collective).
struct Factor {
  double value = 1.0;
  at::Tensor tensor;  // float64, one element, on the device
  double get() const {
    return tensor.defined() ? *static_cast<const double*>(tensor.data_ptr())
                            : value;
  }
};

Factor factorOf(const c10d::ReduceOp& op, c10::DeviceIndex device);

// An output the collective writes through `stand_in`, its contiguous version
// (contiguousOrCopy): copied back unless they are the same tensor.
CopyBacks copyBackIfStaged(const at::Tensor& output,
                           const at::Tensor& stand_in);

// Outputs filled from consecutive pieces of the flat buffer `buf`.
CopyBacks unpack(const std::vector<at::Tensor>& outputs, const at::Tensor& buf);

// Whether a profile records device items (then each collective's item gets
// its note).
bool tracingItems();

void checkSingle(const std::vector<at::Tensor>& tensors, const char* what);

}  // namespace backend_impl

template <typename Body>
c10::intrusive_ptr<c10d::Work> NeuronBackend::enqueue(
    const char* label, c10d::OpType type, c10::DeviceIndex device,
    const std::vector<at::Tensor>& used, std::vector<at::Tensor> outputs,
    Body body, const CollectiveFacts& facts, CopyBacks copies,
    bool blocks_host) {
  const uint64_t seq = ++seq_;
  const c10::Stream current = currentStream(device);
  // Inside a compiled program (its stream is batching) the collective is a
  // step of the program, in order with its kernels, rather than an item on
  // the comm stream: events would cut the program in pieces.
  const bool in_program = runtimeStream(current).batching();
  const c10::Stream comm = in_program ? current : commStream(device);
  if (!in_program) {
    // After what the caller queued so far.
    c10::Event ready(c10::DeviceType::PrivateUse1);
    ready.record(current);
    ready.block(comm);
  } else if (comm_stream_ && !runtimeStream(*comm_stream_).query()) {
    // A transport runs one collective at a time, in the order queued: after
    // the eager ones still on the comm stream (this cuts the program there).
    c10::Event prior(c10::DeviceType::PrivateUse1);
    prior.record(*comm_stream_);
    prior.block(current);
  }
  for (const at::Tensor& t : used)
    if (t.defined()) t.record_stream(comm);
  for (auto& [to, from] : copies) {
    to.record_stream(comm);
    from.record_stream(comm);
  }
  auto outcome = std::make_shared<CollectiveOutcome>();
  Transport* c = transport_.get();
  std::string prefix = describe(label, seq);
  // Right before the item is queued: the events and copies above queue
  // items of their own. The caller's thread queues it, so the item links to
  // the c10d op that called the backend.
  if (backend_impl::tracingItems()) noteCollective(facts, seq);
  launchOn(comm, label,
           [c, body = std::move(body), outcome, prefix = std::move(prefix)] {
             try {
               body(*c);
             } catch (const std::exception& e) {
               const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
               std::string msg =
                   prefix +
                   (c10_error ? c10_error->what_without_backtrace() : e.what());
               try {
                 backend_impl::distError(msg);
               } catch (...) {
                 outcome->fail(std::current_exception());
               }
               // Poisons the stream; the next sync raises DistBackendError.
               throw neuron_rt::Error(neuron_rt::Status::kCollectiveFailed,
                                      msg);
             }
           });
  if (!copies.empty()) {
    c10::StreamGuard guard(comm);
    for (auto& [to, from] : copies) to.copy_(from);
  }
  auto work = c10::make_intrusive<NeuronWork>(rank_, type, label, seq, comm,
                                              std::move(outputs), outcome,
                                              blocks_host, in_program);
  work->markQueued();
  return work;
}

}  // namespace torch_neuronx
