// The synchronous path of the generic device op: the op's CPU kernel runs in
// a work item the host waits for, and its results are then placed in device
// memory. For ops whose output metadata the host cannot know beforehand: a
// data-dependent shape (nonzero, unique, masked_select), host values among
// the results, or a Meta kernel that is missing or describes CUDA's outputs.
// Errors of the kernel are raised at the call, as the exception it threw.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <vector>

#include "eager/op_traits.h"

namespace torch_neuronx {

void runSynchronously(const c10::OperatorHandle& op, OpTraits& traits,
                      torch::jit::Stack* stack, std::vector<c10::IValue> args,
                      c10::DeviceIndex device);

}  // namespace torch_neuronx
