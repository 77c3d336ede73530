// The synchronous path of the generic device op: the op's CPU kernel runs in
// a work item the host waits for, and its results are then placed in device
// memory. For ops whose output metadata the host cannot know beforehand: a
// data-dependent shape (nonzero, unique, masked_select), host values among
// the results, or a Meta kernel that is missing or describes CUDA's outputs.
// Errors of the kernel are raised at the call, as the exception it threw.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <memory>
#include <vector>

#include "eager/alias_plan.h"
#include "eager/op_traits.h"

namespace torch_neuronx {

void runSynchronously(const c10::OperatorHandle& op, OpTraits& traits,
                      torch::jit::Stack* stack, std::vector<c10::IValue> args,
                      c10::DeviceIndex device);

// The results of the op's CPU kernel (`results`, on the host) as the op's
// device results, filled by one queued copy item (nothing waits for it):
// fresh results become new device tensors; with `copy_out_args`, out=
// arguments (given fresh CPU tensors) are sized as the CPU's results and get
// them copied in. In-place results are the arguments themselves.
std::vector<c10::IValue> placeCpuResults(const c10::FunctionSchema& schema,
                                         const OpTraits& traits,
                                         const std::vector<c10::IValue>& args,
                                         const torch::jit::Stack& results,
                                         c10::DeviceIndex device,
                                         bool copy_out_args);

// Queues one item that copies host tensors into device tensors: `copies`
// holds `pairs` (device tensor, host tensor) pairs, each recorded with add()
// then keep(). The item runs on one worker thread (core/compute_pool.h: a
// copy is memory-bound, and a second thread's pool would spin against the
// host thread that produces the next item's data).
void queueHostCopies(c10::DeviceIndex device, const char* label,
                     std::shared_ptr<AliasPlan> copies, size_t pairs);

// `dst` (a device out= argument) resized to the CPU kernel's result `cpu`,
// with its strides where the result is dense (the layout CUDA's kernel
// gives); nothing when the sizes match.
void resizeLikeCpuResult(const at::Tensor& dst, const at::Tensor& cpu);

}  // namespace torch_neuronx
