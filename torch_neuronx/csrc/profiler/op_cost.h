// What an eager op's device item costs, told to the profiler: its arithmetic
// (flops) and memory traffic (bytes), from the tensors it reads and writes,
// for the estimated Trainium time (neuron_rt::rooflineNs). Only while a
// profile records device items; otherwise one relaxed load.
#pragma once

#include <neuron_runtime/trace.h>

#include <cstdint>

#include "core/device.h"

namespace torch_neuronx {
class AliasPlan;

namespace profiler {

inline bool recordingItems() {
  return neuron_rt::Runtime::initialized() && runtime().trace().enabled();
}

// Describes the next item this thread queues: op `name` over the tensors of
// `plan` (its arguments, then its results). Matrix products and
// convolutions count 2 flops per multiply-add on the tensor engine; other
// ops one flop per element of their largest tensor on the vector engines.
void noteEagerItem(const char* name, const AliasPlan& plan);

// Describes the next item as a copy of `bytes`.
void noteCopyItem(int64_t bytes);

}  // namespace profiler
}  // namespace torch_neuronx
