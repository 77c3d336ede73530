// The public C++ API (torch_neuronx/include/torch_neuronx/*.h): thin,
// stable entry points over the backend's core, for C++ extensions.
#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>
#include <torch_neuronx/neuron.h>

#include <utility>

#include "core/caching_allocator.h"
#include "core/device.h"
#include "core/stream.h"

namespace torch_neuronx {

void registerBackend();  // core/register_backend.cpp

namespace {

c10::DeviceIndex resolve(c10::DeviceIndex device) {
  return device < 0 ? currentDevice() : device;
}

c10::Stream checkedStream(const c10::Stream& stream) {
  TORCH_CHECK(stream.device_type() == kNeuron,
              "expected a neuron stream, got a stream of ", stream.device());
  return stream;
}

}  // namespace

c10::DeviceIndex getDeviceCount() { return deviceCount(); }

c10::DeviceIndex getDevice() { return currentDevice(); }

void setDevice(c10::DeviceIndex index) { setCurrentDevice(index); }

void init() {
  if (!c10::is_privateuse1_backend_registered())
    c10::register_privateuse1_backend("neuron");
  registerBackend();
}

c10::Stream getCurrentNeuronStream(c10::DeviceIndex device) {
  return currentStream(resolve(device));
}

c10::Stream getDefaultNeuronStream(c10::DeviceIndex device) {
  return defaultStream(resolve(device));
}

c10::Stream getStreamFromPool(bool high_priority, c10::DeviceIndex device) {
  return streamFromPool(resolve(device), high_priority);
}

void setCurrentNeuronStream(c10::Stream stream) {
  setCurrentStream(checkedStream(stream));
}

void streamSynchronize(c10::Stream stream) {
  synchronizeStream(checkedStream(stream));
}

void deviceSynchronize(c10::DeviceIndex device) {
  synchronizeDevice(resolve(device));
}

bool streamQuery(c10::Stream stream) {
  return runtimeStream(checkedStream(stream)).query();
}

c10::DeviceAllocator* getNeuronAllocator() { return &cachingAllocator(); }

c10::DataPtr allocate(size_t nbytes, c10::DeviceIndex device) {
  return cachingAllocator().allocateOn(resolve(device), nbytes);
}

void launchOnCurrentStream(const char* label, std::function<void()> work,
                           c10::DeviceIndex device) {
  TORCH_CHECK(label != nullptr, "a work item needs a label");
  TORCH_CHECK(static_cast<bool>(work), "launchOnCurrentStream: empty work");
  launch(resolve(device), label, std::move(work));
}

void launchOnStream(c10::Stream stream, const char* label,
                    std::function<void()> work) {
  TORCH_CHECK(label != nullptr, "a work item needs a label");
  TORCH_CHECK(static_cast<bool>(work), "launchOnStream: empty work");
  launchOn(checkedStream(stream), label, std::move(work));
}

}  // namespace torch_neuronx
