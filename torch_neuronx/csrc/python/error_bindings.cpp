// How the backend's C++ exceptions reach Python.
//
// A device error (core/device_error.h) becomes torch_neuronx.DeviceError, a
// torch.AcceleratorError whose attributes are the C++ error's fields. Most
// device errors are raised inside torch's own bindings (.item(), .cpu(),
// Stream.synchronize(), torch.accelerator.synchronize()), which would make a
// torch.AcceleratorError of it with only its message and code; so the error
// is raised as the Python exception where it is thrown (a python_error,
// which every binding restores as it is). Other c10 errors raised by the
// bindings of _C keep torch's mapping (IndexError, DistBackendError, ...).
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>

#include <atomic>

#include "core/device_error.h"

namespace py = pybind11;

namespace torch_neuronx {
namespace {

// torch_neuronx.DeviceError, once the package registered it (kept for the
// process: a device error may be raised until it exits).
std::atomic<PyObject*> g_device_error_type{nullptr};

bool interpreterRunning() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// Sets the Python error indicator to `error` as torch_neuronx.DeviceError.
// False (nothing set) when the type is not registered or building the
// exception failed. The GIL must be held.
bool setDeviceError(const DeviceError& error) {
  PyObject* type = g_device_error_type.load(std::memory_order_acquire);
  if (!type) return false;
  const DeviceErrorInfo& info = error.info();
  try {
    py::object step = info.step_index > 0 ? py::object(py::str(info.step))
                                          : py::object(py::none());
    py::object step_index = info.step_index > 0
                                ? py::object(py::int_(info.step_index))
                                : py::object(py::none());
    py::object exc = py::handle(type)(
        error.what_without_backtrace(), py::arg("device") = info.device,
        py::arg("stream") = info.stream, py::arg("work_item") = info.work_item,
        py::arg("op") = info.op, py::arg("step") = step,
        py::arg("step_index") = step_index, py::arg("detail") = info.detail,
        py::arg("error_code") = error.get_error_code());
    PyErr_SetObject(type, exc.ptr());
    return true;
  } catch (py::error_already_set&) {
    return false;  // the error of building it is dropped: the device's stands
  }
}

// The thrower (core/device_error.h): raises the Python exception from here,
// whichever binding the error goes through.
void throwAsPython(const DeviceError& error) {
  if (!g_device_error_type.load(std::memory_order_acquire) ||
      !interpreterRunning())
    return;  // thrown as the C++ DeviceError
  py::gil_scoped_acquire gil;
  if (!setDeviceError(error)) return;
  python_error raised;
  raised.persist();  // it may be rethrown on another thread (autograd)
  throw raised;
}

}  // namespace

void translateErrors() {
  // Local: torch's own bindings keep their translations.
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (python_error& e) {
      e.restore();
    } catch (const DeviceError& e) {
      if (!setDeviceError(e))
        PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
    } catch (const c10::DistBackendError& e) {
      py::object type =
          py::module_::import("torch.distributed").attr("DistBackendError");
      PyErr_SetString(type.ptr(), e.what_without_backtrace());
    } catch (const c10::IndexError& e) {
      PyErr_SetString(PyExc_IndexError, e.what_without_backtrace());
    } catch (const c10::OutOfMemoryError& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
    } catch (const c10::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
    }
  });
}

void bindErrors(py::module_& m) {
  // torch_neuronx.DeviceError registers itself when it is defined.
  m.def("_set_device_error_type", [](py::object type) {
    // Never released: a thread may be raising the one it replaces.
    g_device_error_type.store(type.release().ptr(), std::memory_order_release);
    setDeviceErrorThrower(&throwAsPython);
  });
}

}  // namespace torch_neuronx
