// How a work item runs CPU kernels as the simulated core's compute.
//
// On the stream's worker thread: warnings go through the device warning
// handler, the kernels run in inference mode (device work records no
// autograd history), and a c10::Error becomes a plain runtime error whose
// message the runtime records for the next sync point (the backtrace would
// be the worker's, not the user's).
#pragma once

#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <exception>
#include <stdexcept>

#include "eager/device_warnings.h"

namespace torch_neuronx {

template <typename F>
void runOnDevice(F&& f) {
  useDeviceWarningHandler();
  c10::InferenceMode guard;
  try {
    f();
  } catch (const c10::Error& e) {
    throw std::runtime_error(e.what_without_backtrace());
  }
}

// For items the host waits for: the exception `f` threw, as it is (its
// type — IndexError, ValueError, ... — reaches Python when the host
// rethrows it), or null. The stream is not poisoned.
template <typename F>
std::exception_ptr runOnDeviceCapturing(F&& f) {
  useDeviceWarningHandler();
  c10::InferenceMode guard;
  try {
    f();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

}  // namespace torch_neuronx
