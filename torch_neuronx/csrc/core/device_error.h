// A device error as torch sees it: the failure of a work item, raised at the
// next synchronisation point (or at the op under NEURON_LAUNCH_BLOCKING=1).
//
// It is a c10::AcceleratorError (Python: torch.AcceleratorError, as CUDA's
// asynchronous errors), whose error code is the runtime's Status, carrying
// which device, stream and work item failed, the item's op and, for a
// batched program or a replayed graph, the step inside it. Python sees the
// fields as attributes of torch_neuronx.DeviceError (a subclass of
// torch.AcceleratorError): the bindings install a thrower that raises that
// Python exception with its fields set, since torch's own bindings (.item(),
// .cpu(), Stream.synchronize()) turn a c10::AcceleratorError into a
// torch.AcceleratorError with only its message and code.
#pragma once

#include <c10/core/Device.h>
#include <c10/util/Exception.h>
#include <neuron_runtime/stream.h>

#include <cstdint>
#include <string>

namespace torch_neuronx {

struct DeviceErrorInfo {
  int device = 0;          // neuron:<device>
  int stream = 0;          // the stream's id on its device
  uint64_t work_item = 0;  // the item's sequence number on its stream
  std::string op;          // the item's label: "aten::index_select"
  // The failing step of a batched item (a compiled program, a replayed
  // graph): its label and position (from 1); "" and 0 for a plain item.
  std::string step;
  int step_index = 0;
  // What failed: the exception the op (or the step) threw.
  std::string detail;
  neuron_rt::Status status = neuron_rt::Status::kDeviceError;
};

class DeviceError : public c10::AcceleratorError {
 public:
  DeviceError(DeviceErrorInfo info, std::string message);
  const DeviceErrorInfo& info() const { return info_; }

 private:
  DeviceErrorInfo info_;
};

// The device error of `error`, a work item's failure on neuron:<device>.
DeviceErrorInfo deviceErrorInfo(c10::DeviceIndex device,
                                const neuron_rt::WorkError& error);

// Its message, as CUDA words an asynchronous error: "neuron:0: device error
// in aten::index_select (work item 42 on stream 0): index out of range in
// self", then how to find the op unless launch blocking is on.
std::string deviceErrorMessage(const DeviceErrorInfo& info);

// Throws the device error: through the installed thrower (the Python
// bindings'), else as DeviceError.
[[noreturn]] void throwDeviceError(DeviceErrorInfo info);

// A thrower throws `error` as it should reach its caller; returning means it
// could not (then DeviceError itself is thrown).
using DeviceErrorThrower = void (*)(const DeviceError& error);
void setDeviceErrorThrower(DeviceErrorThrower thrower);

}  // namespace torch_neuronx
