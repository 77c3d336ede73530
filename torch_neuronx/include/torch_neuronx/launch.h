// Launching work on a neuron stream: a kernel of an extension runs as one
// work item of a stream, as a CUDA kernel is launched on a CUDA stream.
//
// The simulated NeuronCore executes on the host: a work item is a host
// function that the stream's worker thread runs in stream order, after every
// item queued before it on that stream. Inside it, the data pointers of
// neuron tensors (tensor.data_ptr()) are addressable memory; outside work
// items the host must not touch them (a neuron tensor's data is read with
// .cpu(), which queues a copy). The launching thread returns at once.
//
//   float* out = result.data_ptr<float>();
//   const float* in = input.data_ptr<float>();
//   torch_neuronx::launchOnCurrentStream("my_kernel", [=] {
//     for (int64_t i = 0; i < n; ++i) out[i] = 2 * in[i];
//   });
//
// Capture pointers and sizes, not tensors: as on CUDA, the caching allocator
// reuses a freed tensor's memory only for later work on the same stream, so
// the item may outlive the tensors it uses. An exception thrown by `work`
// fails the item: the stream records it and the next synchronisation of the
// device (.cpu(), .item(), deviceSynchronize()) raises it, naming `label`.
// With NEURON_LAUNCH_BLOCKING=1 each launch waits for its item and raises its
// error at once.
#pragma once

#include <c10/core/Stream.h>
#include <torch_neuronx/macros.h>

#include <functional>

namespace torch_neuronx {

// Queues `work` on the calling thread's current stream of `device` (-1: the
// current device). `label` names the item in errors and in the profiler's
// device timeline; it must live as long as the process (a string literal).
TORCH_NEURONX_API void launchOnCurrentStream(const char* label,
                                             std::function<void()> work,
                                             c10::DeviceIndex device = -1);
// Queues `work` on `stream`.
TORCH_NEURONX_API void launchOnStream(c10::Stream stream, const char* label,
                                      std::function<void()> work);

}  // namespace torch_neuronx
