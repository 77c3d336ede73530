// Adaptive eager's second stage: where an adapted sequence's steps run as
// fused passes. The runtime knows items only as code; the host's side knows
// what each eager item computes (its op, its tensors) and can run groups of
// them tile by tile. It registers a runner, and every part of an adapted
// sequence (a HeldItemsTask with a sequence id) runs through it, on the
// stream's worker: the user's thread never waits for the planning.
//
// A runner must run the steps in order, with the same results as
// CapturedWork::run (bitwise), using CapturedWork::runStep for a step it
// leaves as it is and CapturedWork::runFused for steps it runs as one.
#pragma once

#include <cstdint>

#include "neuron_runtime/captured_work.h"

namespace neuron_rt {

class HeldSequenceRunner {
 public:
  // Runs `work` (a part of adapted sequence `sequence`, labelled `label`).
  virtual void run(const CapturedWork& work, const char* label,
                   uint64_t sequence) = 0;

 protected:
  ~HeldSequenceRunner() = default;
};

// The runner (null: held sequences run their steps as they are). Set once,
// when the host's library loads; lives for the process.
void setHeldSequenceRunner(HeldSequenceRunner* runner);
HeldSequenceRunner* heldSequenceRunner();

}  // namespace neuron_rt
