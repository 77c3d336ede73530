// torch's view of the runtime's streams: which stream is current on each
// device for this host thread, the stream pool, and how work is launched on a
// stream and how its errors reach the user.
#pragma once

#include <c10/core/Stream.h>
#include <neuron_runtime/stream.h>

#include <functional>
#include <string>

namespace torch_neuronx {

c10::Stream currentStream(c10::DeviceIndex device);
c10::Stream defaultStream(c10::DeviceIndex device);
void setCurrentStream(const c10::Stream& stream);
// Round-robin over the device's stream pool (CUDA semantics).
c10::Stream streamFromPool(c10::DeviceIndex device, bool high_priority);

neuron_rt::Stream& runtimeStream(const c10::Stream& stream);

// A work-item label for a name made at run time (labels must outlive the
// process: the trace and pending errors keep them). One copy per name.
const char* internLabel(const std::string& s);

// NEURON_LAUNCH_BLOCKING=1: every launch waits for its item and raises its
// error at the op.
bool launchBlocking();

// Queues `fn` on the current stream of `device`; under launch blocking waits
// and raises.
void launch(c10::DeviceIndex device, const char* label,
            std::function<void()> fn,
            neuron_rt::ItemKind kind = neuron_rt::ItemKind::kCompute);
void launchOn(const c10::Stream& stream, const char* label,
              std::function<void()> fn,
              neuron_rt::ItemKind kind = neuron_rt::ItemKind::kCompute);
// The same for work that carries its own state (the op fast paths).
void launchTask(c10::DeviceIndex device, const char* label,
                neuron_rt::TaskPtr task,
                neuron_rt::ItemKind kind = neuron_rt::ItemKind::kCompute);

// Waits for `stream` and raises any pending device error of its device.
void synchronizeStream(const c10::Stream& stream);
// Waits for every stream of `device` and raises any pending error.
void synchronizeDevice(c10::DeviceIndex device);
// Raises the first pending device error of `device`, if any: a DeviceError
// (core/device_error.h), or DistBackendError for a failed collective.
void raisePendingError(c10::DeviceIndex device);

}  // namespace torch_neuronx
