// torch_neuronx._C._hardware_table(): the Trainium generations the estimates
// model (neuron_runtime/hardware_table.h), for the Python side to take
// rather than restate: {"default": "trn2", "targets": {name: figures}}.
#include <neuron_runtime/hardware_table.h>
#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace torch_neuronx {
namespace {

py::dict specDict(const neuron_rt::HardwareSpec& s) {
  py::dict d;
  d["name"] = s.name;
  d["chip"] = s.chip;
  d["core"] = s.core;
  d["cores_per_chip"] = s.cores_per_chip;
  d["logical_cores"] = s.logical_cores;
  d["tensor_bf16_tflops"] = s.tensor_bf16_tflops;
  d["tensor_fp32_tflops"] = s.tensor_fp32_tflops;
  d["hbm_gb_per_s"] = s.hbm_gb_per_s;
  d["link_gb_per_s"] = s.link_gb_per_s;
  d["tensor_ghz"] = s.tensor_ghz;
  d["vector_ghz"] = s.vector_ghz;
  d["scalar_ghz"] = s.scalar_ghz;
  d["gpsimd_ghz"] = s.gpsimd_ghz;
  d["dma_latency_ns"] = s.dma_latency_ns;
  d["dma_issue_ns"] = s.dma_issue_ns;
  d["hop_latency_ns"] = s.hop_latency_ns;
  return d;
}

py::dict hardwareTable() {
  py::dict targets;
  for (int k = 0; k < neuron_rt::kTargets; ++k) {
    const auto& s = neuron_rt::hardwareSpec(static_cast<neuron_rt::Target>(k));
    targets[s.name] = specDict(s);
  }
  py::dict d;
  d["default"] = neuron_rt::targetName(neuron_rt::kDefaultTarget);
  d["targets"] = targets;
  return d;
}

}  // namespace

void bindHardware(py::module_& m) { m.def("_hardware_table", &hardwareTable); }

}  // namespace torch_neuronx
