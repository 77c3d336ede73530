// Bindings for the pinned host allocator's statistics, in the nested-dict
// shape of torch._C._cuda_hostMemoryStats (torch.cuda.host_memory_stats).
#include <pybind11/pybind11.h>

#include "core/pinned_allocator.h"

namespace py = pybind11;

namespace torch_neuronx {
namespace {

py::dict statDict(const c10::CachingAllocator::Stat& s) {
  py::dict d;
  d["current"] = s.current;
  d["peak"] = s.peak;
  d["allocated"] = s.allocated;
  d["freed"] = s.freed;
  return d;
}

py::dict durationDict(const c10::CachingAllocator::DurationStat& s) {
  py::dict d;
  d["total"] = s.total;
  d["max"] = s.max;
  d["min"] = s.min;
  d["count"] = s.count;
  d["avg"] = s.count == 0 ? 0 : s.total / s.count;
  return d;
}

py::dict hostMemoryStats() {
  at::HostStats s = pinnedAllocator().get_stats();
  py::dict d;
  d["allocations"] = statDict(s.allocations);
  d["allocated_bytes"] = statDict(s.allocated_bytes);
  d["active_requests"] = statDict(s.active_requests);
  d["active_bytes"] = statDict(s.active_bytes);
  d["num_host_alloc"] = s.num_host_alloc;
  d["num_host_free"] = s.num_host_free;
  d["host_alloc_time"] = durationDict(s.host_alloc_time);
  d["host_free_time"] = durationDict(s.host_free_time);
  return d;
}

}  // namespace

void bindHostMemory(py::module_& m) {
  m.def("_host_memory_stats", &hostMemoryStats);
  m.def("_host_reset_peak_stats", [] { pinnedAllocator().reset_peak_stats(); });
  m.def("_host_reset_accumulated_stats",
        [] { pinnedAllocator().reset_accumulated_stats(); });
  m.def("_host_empty_cache", [] { pinnedAllocator().empty_cache(); });
}

}  // namespace torch_neuronx
