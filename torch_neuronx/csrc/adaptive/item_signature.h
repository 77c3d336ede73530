// Adaptive eager (runtime/include/neuron_runtime/sequence_adapter.h): the
// host signs each eager item it queues with what the item was called with,
// so that a stream can recognise a repeated sequence of items. Unsigned
// items (collectives, compiled programs, NKI kernels) are boundaries.
// Nothing happens while the mode is off (one relaxed load).
#pragma once

#include <neuron_runtime/sequence_adapter.h>

#include <cstdint>

namespace torch_neuronx {
class AliasPlan;

namespace adaptive {

inline bool enabled() {
  return neuron_rt::adaptiveSettings().enabled.load(std::memory_order_relaxed);
}

// Signs the next item from its op and the tensors it works on (their
// element sizes, sizes and strides); the lowest bit says whether it is large
// (a tensor of core/compute_pool.h's kSmallItemElements or more). Scalar
// arguments are left out: an optimizer's step size changes every step, and the
// held items keep their own (a fused program will take them as arguments).
void signFromPlan(const char* name, const AliasPlan& plan);

}  // namespace adaptive
}  // namespace torch_neuronx
