// The generic device-op path: runs any ATen operator on neuron tensors.
//
// Host side: output metadata from the operator's Meta kernel (run on meta
// tensors that mirror the arguments), outputs allocated from the caching
// allocator, one work item queued on the current stream. Device side: the
// operator's CPU kernel runs over CPU aliases of the device memory and its
// results land in the preallocated outputs. View ops never queue anything:
// the view's geometry comes from the Meta kernel and is applied to the
// device tensor. Ops whose output shape depends on data (nonzero, unique,
// masked_select) or that return host values run as a work item the host
// waits for, then their outputs are placed in device memory.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torch_neuronx {

void deviceOpFallback(const c10::OperatorHandle& op, c10::DispatchKeySet ks,
                      torch::jit::Stack* stack);

}  // namespace torch_neuronx
