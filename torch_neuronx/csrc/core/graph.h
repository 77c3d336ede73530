// torch.neuron.NeuronGraph: work captured from a stream once and replayed as
// one work item (CUDA graphs' analogue). Between captureBegin() and
// captureEnd(), the items queued on the capturing stream (compiled programs,
// eager ops) are recorded instead of run, and the memory allocated on that
// stream is the graph's own (the allocator's graph pool) until reset():
// replay() runs the same items over the same memory, with no host work per
// op. As with CUDA graphs, inputs are whatever the captured items read (fill
// them before replaying), outputs are overwritten by the next replay, and
// host waits and random ops are not permitted while capturing.
#pragma once

#include <c10/core/Stream.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace neuron_rt {
class CapturedWork;
}

namespace torch_neuronx {

class NeuronGraph {
 public:
  NeuronGraph();
  ~NeuronGraph();
  NeuronGraph(const NeuronGraph&) = delete;
  NeuronGraph& operator=(const NeuronGraph&) = delete;

  // Captures the work queued on the current stream of the current device.
  void captureBegin();
  void captureEnd();
  // Queues the captured work on the current stream as one item.
  void replay();
  // Drops the captured work and gives the graph's memory back (after the
  // replays queued so far).
  void reset();

  uint64_t id() const { return id_; }
  bool captured() const { return work_ != nullptr; }
  size_t numSteps() const;
  // The captured work (null before capture_end): its steps say what they
  // compute where they are eager ops (eager/op_item.h).
  const neuron_rt::CapturedWork* work() const { return work_.get(); }
  // The stream being captured, while capturing.
  std::optional<c10::Stream> captureStream() const { return capturing_; }

 private:
  uint64_t id_;
  const char* label_;  // "neuron graph <id>", interned
  std::optional<c10::Stream> capturing_;
  std::optional<c10::Stream> captured_on_;
  std::shared_ptr<neuron_rt::CapturedWork> work_;
  std::vector<c10::Stream> replayed_on_;  // other streams than captured_on_
};

// True if the current stream of `device` is capturing.
bool currentStreamCapturing(c10::DeviceIndex device);

}  // namespace torch_neuronx
