// Which operators ran on the device, and which the host computed instead
// (TorchNeuron's CPU fallbacks: the op ran on the CPU, its results were copied
// to the device): the linear-algebra decompositions TorchNeuron runs on the
// host are recorded as fallbacks whoever notes them. Random ops are device
// ops whose numbers the host draws: executed. The rules, and why:
// docs/compatibility.md.
// torch_neuronx.get_executed_ops() / get_fallback_ops() read these.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace torch_neuronx {

void noteExecuted(const std::string& op_name);
// Cheap form for hot paths: records the op unless `seen` already equals the
// current generation (bumped by clearOpStats()).
void noteExecutedOnce(const char* op_name, std::atomic<uint32_t>& seen);

// From now on, also records every operator the dispatcher sees called with
// neuron tensors or the neuron device — composite ones (aten::full,
// aten::clone, aten::linear, ...) that never reach a neuron kernel
// themselves. Costs a RecordFunction per operator call, so it is on only
// once asked for (torch_neuronx's op-tracking functions,
// TORCH_NEURONX_OP_TRACKING=1).
void trackOperatorCalls();
bool trackingOperatorCalls();

// A kernel of ours that records its op once per generation, then runs.
template <const char* Name, auto Fn, typename Sig = decltype(Fn)>
struct Noted;
template <const char* Name, auto Fn, typename R, typename... A>
struct Noted<Name, Fn, R (*)(A...)> {
  static R call(A... a) {
    static std::atomic<uint32_t> seen{0};
    noteExecutedOnce(Name, seen);
    return Fn(std::forward<A>(a)...);
  }
};

std::vector<std::string> executedOps();
std::vector<std::string> fallbackOps();
void clearOpStats();

}  // namespace torch_neuronx
