// torch_neuronx._C profiler bindings: the last profiling session's device
// items (the Parquet tables, the step summary) and the Trainium model the
// estimates use.
#include <neuron_runtime/status.h>
#include <neuron_runtime/trainium_estimate.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <limits>
#include <string>
#include <vector>

#include "core/device.h"
#include "eager/host_fallback_ops.h"
#include "profiler/device_timeline.h"
#include "profiler/op_cost.h"
#include "python/target_caster.h"

namespace py = pybind11;

namespace torch_neuronx {
namespace {

py::list lastItems() {
  py::list out;
  for (const auto& it : profiler::lastSessionItems()) {
    py::dict d;
    d["device"] = it.device;
    d["stream"] = it.stream;
    d["seq"] = it.seq;
    d["name"] = it.name;
    d["category"] = it.category;
    d["start_ns"] = it.start_ns;
    d["end_ns"] = it.end_ns;
    d["queued_ns"] = it.queued_ns;
    d["host_thread"] = it.host_thread;
    d["correlation"] = it.correlation;
    d["skipped"] = it.skipped;
    d["flops"] = it.flops;
    d["bytes"] = it.bytes;
    d["engine"] = it.engine;
    d["element_bytes"] = it.element_bytes;
    d["adaptive_sequence"] = it.adaptive_sequence;
    d["estimate_ns"] = it.estimate_ns;
    // The estimate's parts; NaN when it has none (no estimate, or an NKI
    // kernel's cost-model total).
    const bool parts = it.has_parts && it.estimate_ns >= 0;
    const double none = std::numeric_limits<double>::quiet_NaN();
    d["estimate_compute_ns"] = parts ? it.parts.compute_ns : none;
    d["estimate_dma_ns"] = parts ? it.parts.dma_ns : none;
    d["estimate_latency_ns"] = parts ? it.parts.latency_ns : none;
    d["estimate_overlap_ns"] = parts ? it.parts.overlap_ns : none;
    d["estimate_start_ns"] = it.estimate_start_ns;
    d["parent"] = it.parent;
    d["fused_into"] = it.fused_into;
    d["detail"] = it.detail;
    out.append(d);
  }
  return out;
}

py::dict modelDict(const neuron_rt::TrainiumModel& m) {
  py::dict d;
  d["name"] = m.name;
  d["physical_cores"] = m.physical_cores;
  d["tensor_bf16_flops_per_ns"] = m.tensor_bf16_flops_per_ns;
  d["tensor_fp32_flops_per_ns"] = m.tensor_fp32_flops_per_ns;
  d["tensor_fp8_flops_per_ns"] = m.tensor_fp8_flops_per_ns;
  d["tensor_ghz"] = m.tensor_ghz;
  d["pe_rows"] = m.pe_rows;
  d["pe_cols"] = m.pe_cols;
  d["moving_free"] = m.moving_free;
  d["min_matmul_cycles"] = m.min_matmul_cycles;
  d["vector_elems_per_ns"] = m.vector_elems_per_ns;
  d["hbm_bytes_per_ns"] = m.hbm_bytes_per_ns;
  d["dma_start_ns"] = m.dma_start_ns;
  d["dma_half_payload_bytes"] = m.dma_half_payload_bytes;
  d["launch_ns"] = m.launch_ns;
  d["fixed_ns"] = m.fixed_ns;
  d["link_bytes_per_ns"] = m.link_bytes_per_ns;
  d["cc_bytes_per_ns"] = m.cc_bytes_per_ns;
  d["chip_link_bytes_per_ns"] = m.chip_link_bytes_per_ns;
  d["host_link_bytes_per_ns"] = m.host_link_bytes_per_ns;
  d["cores_per_chip"] = m.cores_per_chip;
  d["chips_per_host"] = m.chips_per_host;
  d["collective_fixed_ns"] = m.collective_fixed_ns;
  d["hop_latency_ns"] = m.hop_latency_ns;
  d["link_hop_latency_ns"] = m.link_hop_latency_ns;
  d["efa_hop_latency_ns"] = m.efa_hop_latency_ns;
  d["efa_collective_fixed_ns"] = m.efa_collective_fixed_ns;
  d["efa_collective_fixed_large_ns"] = m.efa_collective_fixed_large_ns;
  d["efa_large_message_bytes"] = m.efa_large_message_bytes;
  return d;
}

// The model of `target` ("" : the selected one) for a logical core of `lnc`
// NeuronCores (0: the device's, as deviceModel()).
neuron_rt::TrainiumModel modelFor(const std::string& target, int lnc) {
  if (lnc < 0)
    throw py::value_error(
        "lnc must be 0 (the device's) or a positive number "
        "of NeuronCores, got " +
        std::to_string(lnc));
  neuron_rt::Target t;
  try {
    t = target.empty() ? neuron_rt::trainiumModel().target
                       : neuron_rt::parseTarget(target);
  } catch (const neuron_rt::Error& e) {
    throw py::value_error(e.what());
  }
  const neuron_rt::HardwareSpec& spec = neuron_rt::hardwareSpec(t);
  if (lnc == 0)
    lnc = runtime().topology().config().logical_core_size;
  else if (lnc > 1 && !spec.logical_cores)
    throw py::value_error(std::string(spec.name) +
                          " has no logical cores: lnc must be 0 or 1, got " +
                          std::to_string(lnc));
  else if (spec.cores_per_chip % lnc != 0)
    throw py::value_error(
        "lnc " + std::to_string(lnc) + " does not divide " + spec.name + "'s " +
        std::to_string(spec.cores_per_chip) + " NeuronCores per chip");
  return neuron_rt::logicalCoreModel(neuron_rt::trainiumModel(t), lnc);
}

py::dict partsDict(const neuron_rt::EstimateParts& p) {
  py::dict d;
  d["estimate_ns"] = neuron_rt::roundedNs(p);
  d["compute_ns"] = p.compute_ns;
  d["dma_ns"] = p.dma_ns;
  d["latency_ns"] = p.latency_ns;
  d["overlap_ns"] = p.overlap_ns;
  return d;
}

// The estimate of one eager item: op `name` over tensors of `sizes` and
// `itemsizes`, in the order noteEagerItem sees them (op_cost.h).
py::dict estimateOp(const std::string& name,
                    const std::vector<std::vector<int64_t>>& sizes,
                    const std::vector<int64_t>& itemsizes,
                    const std::string& target, int lnc) {
  if (sizes.size() != itemsizes.size())
    throw py::value_error("_estimate_op: " + std::to_string(sizes.size()) +
                          " sizes but " + std::to_string(itemsizes.size()) +
                          " itemsizes (one of each per tensor)");
  std::vector<profiler::OpTensor> tensors(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (itemsizes[i] < 0)
      throw py::value_error("_estimate_op: tensor " + std::to_string(i) +
                            " has a negative itemsize " +
                            std::to_string(itemsizes[i]));
    for (int64_t s : sizes[i])
      if (s < 0)
        throw py::value_error("_estimate_op: tensor " + std::to_string(i) +
                              " has a negative size " + std::to_string(s));
    tensors[i] = profiler::OpTensor{sizes[i], itemsizes[i]};
  }
  const neuron_rt::TrainiumModel model = modelFor(target, lnc);
  const neuron_rt::ItemWork w = profiler::eagerOpWork(name.c_str(), tensors);
  const bool fallback = isHostFallbackOp(name);
  // A host fallback's round trip; the host's compute, which a real run
  // measures, is not known here (fallback="host" says so).
  py::dict d = partsDict(fallback ? profiler::hostFallbackParts(tensors, model)
                                  : neuron_rt::estimateItem(w, model));
  if (fallback) d["fallback"] = "host";
  d["flops"] = w.flops;
  d["bytes"] = w.bytes;
  d["tensor_engine"] = w.tensor_engine;
  d["engine"] = fallback ? "host"
                         : neuron_rt::engineName(w.flops, w.tensor_engine,
                                                 w.element_bytes);
  return d;
}

// The estimate of one collective of `kind` over the group of global
// `ranks`, as the neuron backend makes it (noteCollective).
py::dict estimateCollective(const std::string& kind, double bytes,
                            const std::vector<int>& ranks,
                            const std::string& target, int lnc,
                            int ranks_per_chip, int chips_per_host) {
  neuron_rt::CollectiveShape shape;
  try {
    shape = neuron_rt::parseCollectiveShape(kind);
  } catch (const neuron_rt::Error& e) {
    throw py::value_error(e.what());
  }
  if (!(bytes >= 0))
    throw py::value_error("_estimate_collective: bytes must be >= 0, got " +
                          std::to_string(bytes));
  if (ranks.empty())
    throw py::value_error("_estimate_collective: the group has no ranks");
  for (int r : ranks)
    if (r < 0)
      throw py::value_error("_estimate_collective: negative rank " +
                            std::to_string(r));
  if (ranks_per_chip < 0 || chips_per_host < 0)
    throw py::value_error(
        "_estimate_collective: ranks_per_chip and chips_per_host must be >= 0 "
        "(0: the target's)");
  const neuron_rt::TrainiumModel model = modelFor(target, lnc);
  neuron_rt::EstimateParts p;
  try {
    p = neuron_rt::collectiveEstimate(shape, bytes, ranks, model,
                                      {ranks_per_chip, chips_per_host});
  } catch (const neuron_rt::Error& e) {
    throw py::value_error(e.what());
  }
  py::dict d = partsDict(p);
  d["flops"] = 0.0;
  d["bytes"] = bytes;
  d["tensor_engine"] = false;
  d["engine"] = "";
  return d;
}

}  // namespace

void bindProfiler(py::module_& m) {
  m.def("_profiler_items", &lastItems);
  // The model of one device (a logical core) the estimates use.
  m.def("_profiler_target", [] {
    py::dict d = modelDict(profiler::deviceModel());
    d["physical_cores_per_device"] = profiler::physicalCoresPerDevice();
    return d;
  });
  m.def("_profiler_set_target",
        [](neuron_rt::Target target) { neuron_rt::setTrainiumTarget(target); });
  m.def("_estimate_op", &estimateOp, py::arg("name"), py::arg("sizes"),
        py::arg("itemsizes"), py::arg("target") = "", py::arg("lnc") = 0);
  m.def("_estimate_collective", &estimateCollective, py::arg("kind"),
        py::arg("bytes"), py::arg("ranks"), py::arg("target") = "",
        py::arg("lnc") = 0, py::arg("ranks_per_chip") = 0,
        py::arg("chips_per_host") = 0);
  m.def("_roofline_ns",
        [](double flops, double bytes, bool tensor_engine, int element_bytes) {
          return neuron_rt::rooflineNs(flops, bytes, tensor_engine,
                                       element_bytes, profiler::deviceModel());
        });
}

}  // namespace torch_neuronx
