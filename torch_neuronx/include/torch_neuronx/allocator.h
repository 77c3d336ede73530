// The neuron device allocator: the caching allocator behind every neuron
// tensor (torch.neuron.memory_allocated() and the rest count what it holds).
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Stream.h>
#include <torch_neuronx/macros.h>

#include <cstddef>

namespace torch_neuronx {

// The allocator (c10::DeviceAllocator: allocate(), recordStream(),
// emptyCache(), getDeviceStats(), ...). allocate(n) takes device memory of
// the current device for use on its current stream: memory freed is reused
// by later work on that stream, in stream order, so work already queued that
// uses it is safe. Memory used on another stream needs
// allocator->recordStream(ptr, stream), as with CUDA.
TORCH_NEURONX_API c10::DeviceAllocator* getNeuronAllocator();

// Device memory of `device` (-1: the current device) for use on its current
// stream; freed when the DataPtr is. Throws c10::OutOfMemoryError when the
// device's memory is exhausted.
TORCH_NEURONX_API c10::DataPtr allocate(size_t nbytes,
                                        c10::DeviceIndex device = -1);

}  // namespace torch_neuronx
