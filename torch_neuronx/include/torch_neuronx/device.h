// The neuron devices: their count, the current device of the calling host
// thread, and NeuronGuard, the device guard (c10::cuda::CUDAGuard's
// counterpart).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>
#include <torch_neuronx/macros.h>

namespace torch_neuronx {

// The neuron device type (torch's PrivateUse1, named "neuron").
constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

// torch.neuron.device_count(): every index below it names a neuron device.
TORCH_NEURONX_API c10::DeviceIndex getDeviceCount();
// The calling thread's current neuron device (torch.neuron.current_device()).
TORCH_NEURONX_API c10::DeviceIndex getDevice();
// Makes `index` the calling thread's current device; throws c10::IndexError
// for an index that is not one of this process's devices.
TORCH_NEURONX_API void setDevice(c10::DeviceIndex index);

// Registers the neuron backend with c10 and ATen (the device name "neuron",
// its hooks and allocators) in a program without Python; `import
// torch_neuronx` (or `import torch`, which autoloads it) does this for an
// extension. Calling it again does nothing.
TORCH_NEURONX_API void init();

// Makes a neuron device current for the scope (restoring the previous one at
// its end), as c10::cuda::CUDAGuard does for CUDA devices.
class NeuronGuard {
 public:
  explicit NeuronGuard(c10::DeviceIndex index)
      : guard_(c10::Device(kNeuron, index)) {}
  explicit NeuronGuard(c10::Device device) : guard_(checked(device)) {}
  NeuronGuard(const NeuronGuard&) = delete;
  NeuronGuard& operator=(const NeuronGuard&) = delete;

  // Makes another device current; the end of the scope still restores the
  // device that was current at construction.
  void set_index(c10::DeviceIndex index) { guard_.set_index(index); }
  c10::Device original_device() const { return guard_.original_device(); }
  c10::Device current_device() const { return guard_.current_device(); }

 private:
  static c10::Device checked(c10::Device device) {
    TORCH_CHECK(device.type() == kNeuron,
                "NeuronGuard expects a neuron device, got ", device);
    return device;
  }
  c10::DeviceGuard guard_;
};

}  // namespace torch_neuronx
