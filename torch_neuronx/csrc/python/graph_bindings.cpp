// Bindings of torch.neuron graphs (torch_neuronx/graphs.py): capture a
// stream's work once, replay it as one work item.
#include <pybind11/pybind11.h>

#include "core/graph.h"

namespace py = pybind11;

namespace torch_neuronx {

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
      .def_property_readonly("num_steps", &NeuronGraph::numSteps);
  m.def("_is_current_stream_capturing", [](int device) {
    return currentStreamCapturing(static_cast<c10::DeviceIndex>(device));
  });
}

}  // namespace torch_neuronx
