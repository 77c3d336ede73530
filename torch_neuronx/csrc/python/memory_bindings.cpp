// Bindings of the allocator's memory controls: the per-process memory
// fraction, snapshots of segments and blocks, and history recording. Results
// use CUDA's snapshot layout (torch.cuda.memory._snapshot), so tools written
// for it read them too.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <unordered_map>

#include "core/caching_allocator.h"
#include "core/device.h"
#include "core/python_stacks.h"

namespace py = pybind11;

namespace torch_neuronx {
namespace {

// Python frames of each recorded context, symbolized in one batch.
class Frames {
 public:
  void add(c10::GatheredContext* ctx) {
    if (ctx && !index_.count(ctx)) {
      index_[ctx] = pending_.size();
      pending_.push_back(static_cast<torch::CapturedTraceback*>(ctx));
    }
  }
  void symbolize() {
    if (!pending_.empty()) done_ = torch::symbolize(pending_);
  }
  py::list of(c10::GatheredContext* ctx) const {
    py::list out;
    auto it = index_.find(ctx);
    if (!ctx || it == index_.end()) return out;
    for (uint64_t f : done_.tracebacks.at(it->second)) {
      const auto& fr = done_.all_frames.at(f);
      py::dict d;
      d["filename"] = fr.filename;
      d["name"] = fr.funcname;
      d["line"] = fr.lineno;
      out.append(d);
    }
    return out;
  }

 private:
  std::unordered_map<c10::GatheredContext*, size_t> index_;
  std::vector<torch::CapturedTraceback*> pending_;
  torch::SymbolizedTracebacks done_;
};

py::object opName(const char* op) {
  return op ? py::object(py::str(op)) : py::object(py::none());
}

py::dict snapshot() {
  std::vector<SegmentSnapshot> segs;
  std::vector<std::vector<TraceEntry>> traces;
  {
    py::gil_scoped_release release;
    segs = cachingAllocator().snapshot();
    if (neuron_rt::Runtime::initialized())
      for (c10::DeviceIndex d = 0; d < deviceCount(); ++d)
        traces.push_back(cachingAllocator().trace(d));
  }
  Frames frames;
  for (const auto& s : segs)
    for (const auto& b : s.blocks) frames.add(b.context.get());
  for (const auto& t : traces)
    for (const auto& e : t) frames.add(e.context.get());
  frames.symbolize();

  py::list segments;
  for (const auto& s : segs) {
    py::dict d;
    d["device"] = s.device;
    d["address"] = s.address;
    d["total_size"] = s.total_size;
    d["allocated_size"] = s.allocated_size;
    d["active_size"] = s.active_size;
    d["requested_size"] = s.requested_size;
    d["stream"] = s.stream;
    d["segment_type"] = s.small ? "small" : "large";
    d["segment_pool_id"] = py::make_tuple(0, 0);
    d["is_expandable"] = false;
    d["frames"] = py::list();
    py::list blocks;
    for (const auto& b : s.blocks) {
      py::dict bd;
      bd["address"] = b.address;
      bd["size"] = b.size;
      bd["requested_size"] = b.requested_size;
      bd["state"] = b.state;
      bd["op"] = opName(b.op);
      bd["frames"] = frames.of(b.context.get());
      blocks.append(bd);
    }
    d["blocks"] = blocks;
    segments.append(d);
  }
  py::list device_traces;
  for (const auto& t : traces) {
    py::list entries;
    for (const auto& e : t) {
      py::dict ed;
      ed["action"] = e.action;
      ed["addr"] = e.address;
      ed["size"] = e.size;
      ed["stream"] = e.stream;
      ed["op"] = opName(e.op);
      ed["time_us"] = e.time_us;
      ed["frames"] = frames.of(e.context.get());
      if (e.device_free) ed["device_free"] = e.device_free;
      entries.append(ed);
    }
    device_traces.append(entries);
  }
  py::dict out;
  out["segments"] = segments;
  out["device_traces"] = device_traces;
  return out;
}

}  // namespace

void bindMemory(py::module& m) {
  // The allocator's history gathers Python stacks on the threads Python knows.
  setPythonThreadProbe([] {
    return Py_IsInitialized() && PyGILState_GetThisThreadState() != nullptr;
  });
  m.def("_set_memory_fraction", [](double fraction, int device) {
    cachingAllocator().setMemoryFraction(fraction,
                                         static_cast<c10::DeviceIndex>(device));
  });
  m.def("_get_memory_fraction", [](int device) {
    return cachingAllocator().getMemoryFraction(
        static_cast<c10::DeviceIndex>(device));
  });
  m.def("_memory_snapshot", &snapshot);
  m.def("_record_memory_history",
        [](bool enabled, bool python_stacks, size_t max_entries) {
          cachingAllocator().recordHistory(enabled, python_stacks, max_entries);
        });
}

}  // namespace torch_neuronx
