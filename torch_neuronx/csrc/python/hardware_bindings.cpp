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
  d["tensor_fp8_tflops"] = s.tensor_fp8_tflops;
  d["hbm_gb_per_s"] = s.hbm_gb_per_s;
  d["link_gb_per_s"] = s.link_gb_per_s;
  d["cc_cores"] = s.cc_cores;
  d["core_tensor_bf16_tflops"] = s.core_tensor_bf16_tflops;
  d["core_tensor_fp32_tflops"] = s.core_tensor_fp32_tflops;
  d["core_tensor_fp8_tflops"] = s.core_tensor_fp8_tflops;
  d["sbuf_mib"] = s.sbuf_mib;
  d["dma_engines"] = s.dma_engines;
  d["dma_engine_gb_per_s"] = s.dma_engine_gb_per_s;
  d["tensor_ghz"] = s.tensor_ghz;
  d["vector_ghz"] = s.vector_ghz;
  d["scalar_ghz"] = s.scalar_ghz;
  d["gpsimd_ghz"] = s.gpsimd_ghz;
  d["instance"] = s.instance;
  d["chips_per_host"] = s.chips_per_host;
  d["efa_gbps"] = s.efa_gbps;
  d["dma_start_ns"] = s.dma_start_ns;
  d["dma_latency_ns"] = s.dma_latency_ns;
  d["dma_issue_ns"] = s.dma_issue_ns;
  d["dma_half_payload_bytes"] = s.dma_half_payload_bytes;
  d["launch_ns"] = s.launch_ns;
  d["min_matmul_cycles"] = s.min_matmul_cycles;
  d["cc_gb_per_s"] = s.cc_gb_per_s;
  d["collective_fixed_ns"] = s.collective_fixed_ns;
  d["hop_latency_ns"] = s.hop_latency_ns;
  d["link_hop_latency_ns"] = s.link_hop_latency_ns;
  d["efa_hop_latency_ns"] = s.efa_hop_latency_ns;
  d["efa_collective_fixed_ns"] = s.efa_collective_fixed_ns;
  d["efa_collective_fixed_large_ns"] = s.efa_collective_fixed_large_ns;
  d["efa_large_message_bytes"] = s.efa_large_message_bytes;
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
