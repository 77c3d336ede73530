#include "distributed/neuron_work.h"

#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <thread>

#include "core/stream.h"

namespace torch_neuronx {

NeuronWork::NeuronWork(int rank, c10d::OpType type, const char* title,
                       uint64_t seq, c10::Stream comm,
                       std::vector<at::Tensor> outputs,
                       std::shared_ptr<CollectiveOutcome> outcome,
                       bool blocks_host, bool in_program)
    : c10d::Work(rank, type, title),
      seq_(seq),
      comm_(comm),
      outputs_(std::move(outputs)),
      outcome_(std::move(outcome)),
      blocks_host_(blocks_host),
      in_program_(in_program) {
  std::vector<c10::Device> devices;
  if (!in_program) devices.push_back(comm.device());
  future_ = c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()), std::move(devices));
}

void NeuronWork::markQueued() {
  if (in_program_) {
    future_->markCompleted(c10::IValue(outputs_));
    return;
  }
  done_.record(comm_);
  // The future's value is ready on the device once the comm stream gets
  // there: completing it with the comm stream current records that point,
  // and consumers' streams wait for it (c10::ivalue::Future with devices).
  c10::StreamGuard guard(comm_);
  future_->markCompleted(c10::IValue(outputs_));
}

bool NeuronWork::isCompleted() {
  return in_program_ ? runtimeStream(comm_).query() : done_.query();
}

bool NeuronWork::isSuccess() const {
  return !outcome_->failed.load(std::memory_order_acquire);
}

std::exception_ptr NeuronWork::exception() const {
  std::lock_guard<std::mutex> g(outcome_->mu);
  return outcome_->error;
}

std::vector<at::Tensor> NeuronWork::result() { return outputs_; }

void NeuronWork::raiseIfFailed() const {
  if (!outcome_->failed.load(std::memory_order_acquire)) return;
  std::rethrow_exception(exception());
}

void NeuronWork::synchronize() {
  if (in_program_) {  // the caller's stream runs it before what follows
    raiseIfFailed();
    return;
  }
  // Later work on the caller's current stream runs after the collective.
  done_.block(currentStream(comm_.device_index()));
  raiseIfFailed();
}

bool NeuronWork::wait(std::chrono::milliseconds timeout) {
  if (!blocks_host_ && timeout == kNoTimeout) {
    synchronize();
    return true;
  }
  if (in_program_) {
    // The host waits for the program's stream (the held program is queued).
    runtimeStream(comm_).synchronize();
    raiseIfFailed();
    return true;
  }
  // barrier(), or a caller that asked for a bound: the host waits.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(20);
  while (!done_.query()) {
    if (timeout != kNoTimeout && std::chrono::steady_clock::now() > deadline)
      C10_THROW_ERROR(
          DistBackendError,
          c10::str("neuron backend: ", opTypeToString(opType_),
                   " (sequence number ", seq_, ") did not complete within ",
                   timeout.count(), " ms"));
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
  raiseIfFailed();
  done_.block(currentStream(comm_.device_index()));
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> NeuronWork::getFuture() {
  return future_;
}

}  // namespace torch_neuronx
