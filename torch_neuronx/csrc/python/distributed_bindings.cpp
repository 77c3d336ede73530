// Bindings of the `neuron` process-group backend: one factory, called by
// torch_neuronx/distributed/backend.py's creator function registered with
// torch.distributed.Backend.register_backend.
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "distributed/backend_options.h"
#include "distributed/neuron_backend.h"

namespace py = pybind11;

namespace torch_neuronx {

void bindDistributed(py::module_& m) {
  py::class_<NeuronBackendOptions, c10d::Backend::Options,
             c10::intrusive_ptr<NeuronBackendOptions>>(m,
                                                       "_NeuronBackendOptions")
      .def("__deepcopy__",
           [](const NeuronBackendOptions& o, py::dict) { return o.clone(); });
  py::class_<NeuronBackend, c10d::Backend, c10::intrusive_ptr<NeuronBackend>>(
      m, "_NeuronBackend")
      .def_property_readonly("options", &NeuronBackend::getBackendOptions)
      .def_property_readonly("transport", &NeuronBackend::transportKind);
  m.def(
      "_create_neuron_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         double timeout_seconds, std::string group_name,
         std::optional<c10::intrusive_ptr<c10d::Backend>> inter_host,
         std::optional<c10::intrusive_ptr<c10d::Backend>> leaders,
         std::vector<int> host_of_rank,
         std::vector<int> global_ranks) -> c10::intrusive_ptr<NeuronBackend> {
        const auto timeout = std::chrono::milliseconds(
            static_cast<int64_t>(timeout_seconds * 1000.0));
        HostSpan hosts;
        if (inter_host) hosts.all = *inter_host;
        if (leaders) hosts.leaders = *leaders;
        hosts.host_of_rank = std::move(host_of_rank);
        return c10::make_intrusive<NeuronBackend>(
            store, rank, size, timeout, std::move(group_name), std::move(hosts),
            std::move(global_ranks));
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::arg("group_name"), py::arg("inter_host") = py::none(),
      py::arg("leaders") = py::none(),
      py::arg("host_of_rank") = std::vector<int>{},
      py::arg("global_ranks") = std::vector<int>{},
      py::call_guard<py::gil_scoped_release>());
  m.def("_cleanup_stale_shared_memory",
        [] { return neuron_rt::collectives::Communicator::cleanupStale(); });
}

}  // namespace torch_neuronx
