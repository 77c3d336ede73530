// Bindings of torch.neuron graphs (torch_neuronx/graphs.py): capture a
// stream's work once, replay it as one work item.
#include <neuron_runtime/captured_work.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include "core/graph.h"
#include "eager/op_item.h"

namespace py = pybind11;

namespace torch_neuronx {

namespace {

// What each captured step computes: its label and, for an eager op, the op,
// its operands (where each lives: storage address and offset, geometry,
// dtype, whether the op writes it) and its arguments (tensors as meta
// tensors).
py::list describeSteps(const NeuronGraph& g) {
  py::list out;
  const neuron_rt::CapturedWork* work = g.work();
  if (!work) return out;
  for (size_t i = 0; i < work->size(); ++i) {
    py::dict step;
    step["label"] = work->stepLabel(i);
    auto* item = dynamic_cast<OpItem*>(work->stepTask(i));
    step["op"] = item ? py::object(py::str(item->op())) : py::none();
    py::list operands, arguments;
    if (item) {
      const AliasPlan& plan = item->operands();
      for (int k = 0; k < plan.count(); ++k) {
        py::dict d;
        const int s = plan.storageOf(k);
        d["kind"] = s >= 0 ? "device" : s == -2 ? "host_scalar" : "undefined";
        if (s >= 0) {
          d["data_ptr"] = reinterpret_cast<uintptr_t>(plan.storageData(s));
          d["storage_nbytes"] = plan.storageBytes(s);
          d["storage_offset"] = plan.offsetOf(k);
          d["sizes"] = py::tuple(py::cast(plan.sizesOf(k).vec()));
          d["strides"] = py::tuple(py::cast(plan.stridesOf(k).vec()));
          d["dtype"] =
              py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(
                  torch::getTHPDtype(plan.dtypeOf(k).toScalarType())));
        }
        d["written"] = item->writes(k);
        operands.append(d);
      }
      for (const c10::IValue& v : item->arguments())
        arguments.append(torch::jit::toPyObject(v));
    }
    step["operands"] = operands;
    step["arguments"] = arguments;
    out.append(step);
  }
  return out;
}

}  // namespace

void bindGraphs(py::module_& m) {
  py::class_<NeuronGraph>(m, "_NeuronGraph")
      .def(py::init<>())
      .def("capture_begin", &NeuronGraph::captureBegin,
           py::call_guard<py::gil_scoped_release>())
      .def("capture_end", &NeuronGraph::captureEnd,
           py::call_guard<py::gil_scoped_release>())
      .def("replay", &NeuronGraph::replay,
           py::call_guard<py::gil_scoped_release>())
      .def("reset", &NeuronGraph::reset,
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("id", &NeuronGraph::id)
      .def_property_readonly("captured", &NeuronGraph::captured)
      .def_property_readonly("num_steps", &NeuronGraph::numSteps)
      .def("steps", &describeSteps);
  m.def("_is_current_stream_capturing", [](int device) {
    return currentStreamCapturing(static_cast<c10::DeviceIndex>(device));
  });
}

}  // namespace torch_neuronx
