// Bindings of the `neuron` process-group backend: one factory, called by
// torch_neuronx/distributed.py's creator function registered with
// torch.distributed.Backend.register_backend.
#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <optional>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "distributed/neuron_backend.h"

namespace py = pybind11;

namespace torch_neuronx {

void bindDistributed(py::module_& m) {
  m.def(
      "_create_neuron_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         double timeout_seconds, std::string group_name,
         std::optional<c10::intrusive_ptr<c10d::Backend>> inter_host)
          -> c10::intrusive_ptr<c10d::Backend> {
        const auto timeout = std::chrono::milliseconds(
            static_cast<int64_t>(timeout_seconds * 1000.0));
        return c10::make_intrusive<NeuronBackend>(
            store, rank, size, timeout, std::move(group_name),
            inter_host ? *inter_host : c10::intrusive_ptr<c10d::Backend>());
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::arg("group_name"), py::arg("inter_host") = py::none(),
      py::call_guard<py::gil_scoped_release>());
  m.def("_cleanup_stale_shared_memory",
        [] { return neuron_rt::collectives::Communicator::cleanupStale(); });
}

}  // namespace torch_neuronx
