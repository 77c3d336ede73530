// torch_neuronx._C profiler bindings: the last profiling session's device
// items (the Parquet tables, the step summary) and the Trainium model the
// estimates use.
#include <neuron_runtime/trainium_estimate.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "profiler/device_timeline.h"
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
    d["estimate_start_ns"] = it.estimate_start_ns;
    d["parent"] = it.parent;
    d["detail"] = it.detail;
    out.append(d);
  }
  return out;
}

py::dict modelDict(const neuron_rt::TrainiumModel& m) {
  py::dict d;
  d["name"] = m.name;
  d["tensor_bf16_flops_per_ns"] = m.tensor_bf16_flops_per_ns;
  d["tensor_fp32_flops_per_ns"] = m.tensor_fp32_flops_per_ns;
  d["vector_elems_per_ns"] = m.vector_elems_per_ns;
  d["hbm_bytes_per_ns"] = m.hbm_bytes_per_ns;
  d["link_bytes_per_ns"] = m.link_bytes_per_ns;
  d["fixed_ns"] = m.fixed_ns;
  d["hop_latency_ns"] = m.hop_latency_ns;
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
  m.def("_roofline_ns",
        [](double flops, double bytes, bool tensor_engine, int element_bytes) {
          return neuron_rt::rooflineNs(flops, bytes, tensor_engine,
                                       element_bytes, profiler::deviceModel());
        });
}

}  // namespace torch_neuronx
