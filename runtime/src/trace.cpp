#include "neuron_runtime/trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>

namespace neuron_rt {

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const char* categoryName(ItemCategory c) {
  switch (c) {
    case ItemCategory::kCompute:
      return "compute";
    case ItemCategory::kCopy:
      return "copy";
    case ItemCategory::kMarker:
      return "marker";
    case ItemCategory::kCollective:
      return "collective";
    case ItemCategory::kProgram:
      return "program";
    case ItemCategory::kKernel:
      return "kernel";
    case ItemCategory::kStep:
      return "step";
    case ItemCategory::kEngine:
      return "engine";
    case ItemCategory::kFused:
      return "fused";
  }
  return "compute";
}

void Trace::add(TraceRecord r) {
  std::lock_guard<std::mutex> g(mu_);
  if (records_.size() >= kMaxRecords) {
    ++dropped_;
    return;
  }
  records_.push_back(std::move(r));
}

std::vector<TraceRecord> Trace::drain() {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<TraceRecord> out;
  out.swap(records_);
  return out;
}

namespace {

struct HostState {
  std::vector<uint64_t> correlations;
  ItemNote pending;
  int32_t tid = static_cast<int32_t>(syscall(SYS_gettid));
};

HostState& hostState() {
  thread_local HostState s;
  return s;
}

}  // namespace

void pushCorrelation(uint64_t id) { hostState().correlations.push_back(id); }

void popCorrelation() {
  auto& c = hostState().correlations;
  if (!c.empty()) c.pop_back();
}

uint64_t currentCorrelation() {
  const auto& c = hostState().correlations;
  return c.empty() ? 0 : c.back();
}

ItemNote& pendingNote() { return hostState().pending; }

ItemNote takePendingNote() {
  HostState& s = hostState();
  ItemNote note = std::move(s.pending);
  s.pending = ItemNote{};
  note.correlation = s.correlations.empty() ? 0 : s.correlations.back();
  note.queued_ns = nowNs();
  note.host_thread = s.tid;
  return note;
}

RunningItem& runningItem() {
  thread_local RunningItem r;
  return r;
}

bool tracingRunningItem() { return runningItem().trace != nullptr; }

void traceChild(const char* label, int64_t start_ns, int64_t end_ns,
                ItemNote note) {
  RunningItem& r = runningItem();
  if (!r.trace) return;
  TraceRecord rec{r.device, r.stream, r.seq, label, start_ns,
                  end_ns,   false,    0,     -1,    {}};
  rec.parent_seq = r.seq;
  rec.child_index = r.children++;
  rec.note = std::move(note);
  r.trace->add(std::move(rec));
}

void setRunningItemEstimate(int64_t estimate_ns) {
  runningItem().estimate_ns = estimate_ns;
}

}  // namespace neuron_rt
