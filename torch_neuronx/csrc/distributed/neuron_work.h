// The handle of one collective of the `neuron` process-group backend
// (c10d::Work), with the semantics ProcessGroupNCCL gives CUDA users:
// the collective is a work item on the backend's communication stream;
// wait() makes the caller's current stream wait for it (the host blocks only
// for barrier() or a timeout), and the future is complete at once, its value
// ordered on the device by events as a CUDA future's is.
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

namespace torch_neuronx {

// Shared by a Work and its work item: how the collective ended.
struct CollectiveOutcome {
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::exception_ptr error;  // a c10::DistBackendError
  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> g(mu);
    error = std::move(e);
    failed.store(true, std::memory_order_release);
  }
};

class NeuronWork final : public c10d::Work {
 public:
  NeuronWork(int rank, c10d::OpType type, const char* title, uint64_t seq,
             c10::Stream comm, std::vector<at::Tensor> outputs,
             std::shared_ptr<CollectiveOutcome> outcome, bool blocks_host,
             bool in_program = false);

  // Called right after the item is queued, with nothing queued in between.
  void markQueued();

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override { return seq_; }

 private:
  void raiseIfFailed() const;

  uint64_t seq_;
  c10::Stream comm_;
  std::vector<at::Tensor> outputs_;
  std::shared_ptr<CollectiveOutcome> outcome_;
  bool blocks_host_;
  // A step of a compiled program on the caller's stream: ordered with what
  // follows by the stream itself, so no event marks it (an event would cut
  // the program).
  bool in_program_;
  c10::Event done_{c10::DeviceType::PrivateUse1};
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace torch_neuronx
