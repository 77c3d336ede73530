// torch_neuronx._C: the Python bindings. Plain values only (ints, strings,
// dicts); tensors, streams and events reach Python through torch's own
// generic classes.
#include <c10/util/Exception.h>
#include <neuron_runtime/runtime.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <mutex>

#include "aten/first_call_validation.h"
#include "aten/op_stats.h"
#include "core/caching_allocator.h"
#include "core/device.h"
#include "core/generator.h"
#include "core/stream.h"

namespace py = pybind11;

namespace torch_neuronx {
void registerBackend();
void bindHostMemory(py::module_& m);
void bindMemory(py::module_& m);
void bindDistributed(py::module_& m);
void bindCompile(py::module_& m);
void bindNki(py::module_& m);
void bindGraphs(py::module_& m);
}  // namespace torch_neuronx

namespace {

using namespace torch_neuronx;

// Runs `f` with the GIL released, translating c10 errors into Python ones.
template <typename F>
auto withoutGil(F&& f) {
  py::gil_scoped_release release;
  return f();
}

py::dict deviceProperties(int index) {
  checkDeviceIndex(static_cast<c10::DeviceIndex>(index));
  const neuron_rt::Topology topo(neuron_rt::Topology::configFromEnv());
  const neuron_rt::CoreInfo& core = topo.core(index);
  py::dict d;
  d["name"] = "NeuronCore-v3 (simulated Trn2)";
  d["total_memory"] = core.hbm_bytes;
  d["logical_core"] = core.logical_core;
  d["chip"] = core.chip;
  d["physical_cores_per_logical_core"] = topo.config().logical_core_size;
  d["logical_cores_per_chip"] = topo.logicalCoresPerChip();
  d["num_chips"] = topo.config().num_chips;
  return d;
}

py::list drainTrace() {
  py::list out;
  for (const auto& r : runtime().trace().drain()) {
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
  // Local: torch's own bindings keep their translations.
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
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

  m.def("_init", [] { (void)runtime(); });
  m.def("_validated_call_count", [] { return validatedCallCount(); });
  m.def("_is_initialized", [] { return neuron_rt::Runtime::initialized(); });
  m.def("_is_in_bad_fork", [] { return neuron_rt::Runtime::inBadFork(); });
  m.def("_device_count", [] {
    // Unlike the noexcept guard hook, report a malformed environment.
    try {
      return neuron_rt::Runtime::visibleDeviceCount();
    } catch (const neuron_rt::Error& e) {
      rethrowRuntimeError(e);
    }
  });
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
  // Default generators of each device (the torch.neuron RNG functions).
  m.def("_manual_seed", [](int d, uint64_t seed) {
    at::Generator g = defaultGenerator(static_cast<c10::DeviceIndex>(d));
    std::lock_guard<std::mutex> lock(g.mutex());
    g.unsafeGetGeneratorImpl()->set_current_seed(seed);
  });
  m.def("_seed", [](int d) {
    at::Generator g = defaultGenerator(static_cast<c10::DeviceIndex>(d));
    std::lock_guard<std::mutex> lock(g.mutex());
    return g.unsafeGetGeneratorImpl()->seed();
  });
  m.def("_initial_seed", [](int d) {
    return defaultGenerator(static_cast<c10::DeviceIndex>(d)).current_seed();
  });
  m.def("_get_rng_state", [](int d) {
    at::Generator g = defaultGenerator(static_cast<c10::DeviceIndex>(d));
    std::lock_guard<std::mutex> lock(g.mutex());
    auto* impl = g.get<NeuronGeneratorImpl>();
    uint64_t seed = impl->current_seed();
    int64_t offset = static_cast<int64_t>(impl->get_offset());
    std::string bytes(16, '\0');
    std::memcpy(bytes.data(), &seed, 8);
    std::memcpy(bytes.data() + 8, &offset, 8);
    return py::bytes(bytes);
  });
  m.def("_set_rng_state", [](int d, uint64_t seed, int64_t offset) {
    at::Generator g = defaultGenerator(static_cast<c10::DeviceIndex>(d));
    std::lock_guard<std::mutex> lock(g.mutex());
    TORCH_CHECK(offset >= 0 && offset % NeuronGeneratorImpl::kOffsetStep == 0,
                "invalid neuron RNG state: offset ", offset,
                " is not a non-negative multiple of ",
                NeuronGeneratorImpl::kOffsetStep);
    auto* impl = g.get<NeuronGeneratorImpl>();
    impl->set_current_seed(seed);
    impl->set_offset(static_cast<uint64_t>(offset));
  });
  m.def("_trace_enable", [](bool on) { runtime().trace().enable(on); });
  m.def("_trace_drain", &drainTrace);
  bindHostMemory(m);
  bindMemory(m);
  bindDistributed(m);
  bindGraphs(m);
  bindCompile(m);
  bindNki(m);
}
