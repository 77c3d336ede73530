// torch_neuronx._C: the Python bindings. Plain values only (ints, strings,
// dicts); tensors, streams and events reach Python through torch's own
// generic classes.
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <neuron_runtime/runtime.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Generator.h>

#include <algorithm>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/caching_allocator.h"
#include "core/device.h"
#include "core/generator.h"
#include "core/openmp_runtime.h"
#include "core/stream.h"
#include "eager/first_call_validation.h"
#include "eager/op_stats.h"
#include "profiler/registration.h"

namespace py = pybind11;

namespace torch_neuronx {
void registerBackend();
void translateErrors();
void bindErrors(py::module_& m);
void bindHostMemory(py::module_& m);
void bindMemory(py::module_& m);
void bindDistributed(py::module_& m);
void bindCompile(py::module_& m);
void bindNki(py::module_& m);
void bindHardware(py::module_& m);
void bindGraphs(py::module_& m);
void bindProfiler(py::module_& m);
void bindAdaptive(py::module_& m);
}  // namespace torch_neuronx

namespace {

using namespace torch_neuronx;

// Runs `f` with the GIL released, translating c10 errors into Python ones.
template <typename F>
auto withoutGil(F&& f) {
  py::gil_scoped_release release;
  return f();
}

py::dict coreProperties(const neuron_rt::Topology& topo,
                        const neuron_rt::CoreInfo& core) {
  py::dict d;
  // TorchNeuron's name is the platform (TorchTitan reads it for peak FLOPS).
  d["name"] = neuron_rt::Topology::platform();
  d["total_memory"] = core.hbm_bytes;
  d["logical_core"] = core.logical_core;
  d["chip"] = core.chip;
  d["physical_cores_per_logical_core"] = topo.config().logical_core_size;
  d["logical_cores_per_chip"] = topo.logicalCoresPerChip();
  d["num_chips"] = topo.config().num_chips;
  return d;
}

// The properties of one of this process's devices.
py::dict deviceProperties(int index) {
  const int core_index = runtimeIndex(static_cast<c10::DeviceIndex>(index));
  const neuron_rt::Topology topo(neuron_rt::Topology::configFromEnv());
  return coreProperties(topo, topo.core(core_index));
}

// The properties of a logical core of the host, visible here or not: another
// local rank's device (CUDA describes every GPU of the host).
py::dict hostCoreProperties(int logical_core) {
  neuron_rt::TopologyConfig config = neuron_rt::Topology::configFromEnv();
  config.visible_cores.clear();
  const neuron_rt::Topology host(config);
  TORCH_CHECK_INDEX(logical_core >= 0 && logical_core < host.numVisibleCores(),
                    "the host has no logical core ", logical_core);
  return coreProperties(host, host.core(logical_core));
}

py::list drainTrace() {
  py::list out;
  for (const auto& r : runtime().trace().drain()) {
    if (r.parent_seq) continue;  // a step or engine: the profiler's detail
    py::dict d;
    d["device"] = r.device;
    d["stream"] = r.stream;
    d["seq"] = r.seq;
    d["label"] = r.label;
    d["start_ns"] = r.start_ns;
    d["end_ns"] = r.end_ns;
    d["skipped"] = r.skipped;
    out.append(d);
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  registerBackend();
  profiler::registerProfiler();
  translateErrors();
  bindErrors(m);

  m.def("_init", [] { (void)runtime(); });
  m.def("_validated_call_count", [] { return validatedCallCount(); });
  m.def("_is_initialized", [] { return neuron_rt::Runtime::initialized(); });
  m.def("_is_in_bad_fork", [] { return neuron_rt::Runtime::inBadFork(); });
  // Unlike the noexcept guard hook, these report a malformed environment.
  m.def("_device_count", [] { return deviceNumbering().limit; });
  // This process's devices: neuron:<first> .. neuron:<first + count - 1>.
  m.def("_device_range", [] {
    const DeviceNumbering n = deviceNumbering();
    return py::make_tuple(n.first, n.count);
  });
  m.def("_device_index_error", &deviceIndexError);
  m.def("_get_device", [] { return static_cast<int>(currentDevice()); });
  m.def("_set_device", [](int d) {
    if (d >= 0) setCurrentDevice(static_cast<c10::DeviceIndex>(d));
  });
  m.def("_exchange_device", [](int d) {
    if (d < 0) return static_cast<int>(currentDevice());
    return static_cast<int>(exchangeDevice(static_cast<c10::DeviceIndex>(d)));
  });
  m.def("_synchronize", [](int d) {
    withoutGil([&] {
      synchronizeDevice(static_cast<c10::DeviceIndex>(d));
      return 0;
    });
  });
  m.def("_device_properties", &deviceProperties);
  m.def("_host_core_properties", &hostCoreProperties);
  m.def("_host_logical_cores", [] {
    neuron_rt::TopologyConfig config = neuron_rt::Topology::configFromEnv();
    config.visible_cores.clear();
    return neuron_rt::Topology(config).numVisibleCores();
  });
  // The chunks this library's own parallel regions (adaptive eager's fused
  // pass) split [0, n) into: (thread number, begin, end), in order.
  m.def("_parallel_chunks", [](int64_t n, int64_t grain) {
    std::mutex mu;
    std::vector<std::tuple<int, int64_t, int64_t>> chunks;
    withoutGil([&] {
      parallelFor(0, n, grain, [&](int64_t b, int64_t e) {
        std::lock_guard<std::mutex> g(mu);
        chunks.emplace_back(at::get_thread_num(), b, e);
      });
    });
    std::sort(chunks.begin(), chunks.end(), [](const auto& x, const auto& y) {
      return std::get<1>(x) < std::get<1>(y);
    });
    return chunks;
  });
  m.def("_set_local_world_from_group", &setLocalWorldFromGroup);
  m.def("_launch_blocking", &launchBlocking);
  m.def("_hbm_bytes_in_use", [](int d) {
    return runtimeDevice(static_cast<c10::DeviceIndex>(d)).hbm().bytesInUse();
  });
  m.def("_empty_cache", [] {
    withoutGil([] {
      cachingAllocator().emptyCache();
      return 0;
    });
  });
  m.def("_get_executed_ops", &executedOps);
  m.def("_get_fallback_ops", &fallbackOps);
  m.def("_clear_op_stats", &clearOpStats);
  m.def("_track_operator_calls", &trackOperatorCalls);
  m.def("_tracking_operator_calls", &trackingOperatorCalls);
  // A device's default generator as a torch.Generator: torch.neuron's RNG
  // functions are the generator's own methods (get_state/set_state are plain
  // calls, not dispatched ops, so they work under fake and local tensor modes,
  // as CUDA's do).
  m.def("_default_generator", [](int d) {
    const at::Generator& g = defaultGenerator(static_cast<c10::DeviceIndex>(d));
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(g));
  });
  m.def("_trace_enable", [](bool on) { runtime().trace().enable(on); });
  m.def("_trace_drain", &drainTrace);
  bindHostMemory(m);
  bindMemory(m);
  bindDistributed(m);
  bindGraphs(m);
  bindCompile(m);
  bindNki(m);
  bindHardware(m);
  bindProfiler(m);
  bindAdaptive(m);
}
