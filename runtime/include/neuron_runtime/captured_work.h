// Work captured from a stream (Stream::beginCapture / endCapture), replayed
// as one item as many times as wanted: the analogue of a CUDA graph. The
// captured items are the very work items the host queued (a compiled
// program, an eager op), kept instead of run and destroyed; replaying runs
// them again in order, over the same device memory, with no host work.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "neuron_runtime/stream.h"

namespace neuron_rt {

class CapturedWork {
 public:
  struct Step {
    const char* label;
    Stream::Fn fn;
    TaskPtr task;  // instead of fn
  };

  explicit CapturedWork(uint64_t id) : id_(id) {}
  CapturedWork(const CapturedWork&) = delete;
  CapturedWork& operator=(const CapturedWork&) = delete;

  uint64_t id() const { return id_; }
  size_t size() const { return steps_.size(); }
  const char* stepLabel(size_t i) const { return steps_.at(i).label; }

  // Runs every step in order; a failing one ends the replay, and the error
  // names the step and `graph` (as a batch's error does).
  void run(const std::string& graph) const;

 private:
  friend class Stream;
  uint64_t id_;
  std::vector<Step> steps_;
};

}  // namespace neuron_rt
