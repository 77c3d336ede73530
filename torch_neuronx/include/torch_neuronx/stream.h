// Neuron streams: the current stream of each device for the calling host
// thread, the stream pool, NeuronStreamGuard, and synchronisation
// (c10::cuda's getCurrentCUDAStream, CUDAStreamGuard, ... counterparts).
//
// A neuron stream is a c10::Stream of the neuron device type: a FIFO of work
// items that the device runs in order (torch_neuronx/launch.h queues one).
// torch.neuron.Stream and torch.Stream objects of the device are the same
// streams; `torch.neuron.current_stream()` in Python and
// getCurrentNeuronStream() in C++ agree.
#pragma once

#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>
#include <torch_neuronx/device.h>
#include <torch_neuronx/macros.h>

namespace torch_neuronx {

// A device index of -1 means the current device (getDevice()).

// The calling thread's current stream of `device`: the default stream unless
// set (setCurrentNeuronStream, NeuronStreamGuard, `with torch.neuron.stream`).
TORCH_NEURONX_API c10::Stream getCurrentNeuronStream(
    c10::DeviceIndex device = -1);
// The default stream of `device` (stream id 0).
TORCH_NEURONX_API c10::Stream getDefaultNeuronStream(
    c10::DeviceIndex device = -1);
// A stream of the device's pool, round-robin (as CUDA's getStreamFromPool).
TORCH_NEURONX_API c10::Stream getStreamFromPool(bool high_priority = false,
                                                c10::DeviceIndex device = -1);
// Makes `stream` the calling thread's current stream of its device (not the
// current device); throws c10::Error for a stream of another device type.
TORCH_NEURONX_API void setCurrentNeuronStream(c10::Stream stream);

// Waits until every item queued on `stream` so far has run, then raises the
// first pending error of its device (a failed work item, as a
// c10::AcceleratorError: torch.neuron.DeviceError in Python).
TORCH_NEURONX_API void streamSynchronize(c10::Stream stream);
// The same for every stream of `device` (torch.neuron.synchronize()).
TORCH_NEURONX_API void deviceSynchronize(c10::DeviceIndex device = -1);
// Whether every item queued on `stream` so far has run.
TORCH_NEURONX_API bool streamQuery(c10::Stream stream);

// Makes `stream` current (and its device the current device) for the scope,
// restoring both at its end, as c10::cuda::CUDAStreamGuard does.
class NeuronStreamGuard {
 public:
  explicit NeuronStreamGuard(c10::Stream stream) : guard_(checked(stream)) {}
  NeuronStreamGuard(const NeuronStreamGuard&) = delete;
  NeuronStreamGuard& operator=(const NeuronStreamGuard&) = delete;

  // Makes another stream current; the end of the scope restores what was
  // current at construction.
  void reset_stream(c10::Stream stream) {
    guard_.reset_stream(checked(stream));
  }
  c10::Stream original_stream() const { return guard_.original_stream(); }
  c10::Stream current_stream() const { return guard_.current_stream(); }
  c10::Device original_device() const { return guard_.original_device(); }
  c10::Device current_device() const { return guard_.current_device(); }

 private:
  static c10::Stream checked(c10::Stream stream) {
    TORCH_CHECK(stream.device_type() == kNeuron,
                "NeuronStreamGuard expects a neuron stream, got a stream of ",
                stream.device());
    return stream;
  }
  c10::StreamGuard guard_;
};

}  // namespace torch_neuronx
