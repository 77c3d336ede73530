// Work-item trace: what each executed item was, when it ran, and what the
// host knew of it when it queued it (the profiler's device timeline).
//
// Off by default; when enabled each stream worker appends one record per
// item, and one per child of an item (a compiled program's steps, an NKI
// kernel's engines). The host describes the item it is about to queue in a
// per-thread ItemNote (the host op's correlation id, its work and traffic);
// the stream moves that note into the item when it is queued. With tracing
// off none of this runs: queueing an item reads one relaxed atomic.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace neuron_rt {

// What kind of device work an item is (the timeline's categories).
enum class ItemCategory : uint8_t {
  kCompute,     // an eager op's kernel
  kCopy,        // a copy between host and device or between devices
  kMarker,      // an event record or wait
  kCollective,  // a collective or point-to-point transfer
  kProgram,     // a compiled program (its steps are children)
  kKernel,      // an NKI kernel (its engines are children)
  kStep,        // a step of a program, batch or replayed graph
  kEngine,      // an engine's busy time inside an NKI kernel (estimate only)
  kFused,       // adaptive eager: steps run as one pass (its ops follow it)
};
const char* categoryName(ItemCategory c);

// An estimate's parts (trainium_estimate.h): estimate = compute + dma +
// latency - overlap, so the parts explain the total. All ns, >= 0; overlap
// is the time compute and DMA run at once (at most the smaller of the two).
struct EstimateParts {
  double compute_ns = 0;  // the engines' time (tensor or vector/scalar)
  double dma_ns = 0;      // the DMA queues' time (HBM, links)
  double latency_ns = 0;  // fixed costs: launch, DMA setup, collective hops
  double overlap_ns = 0;  // compute and DMA at once: subtracted
  double totalNs() const {
    return compute_ns + dma_ns + latency_ns - overlap_ns;
  }
  EstimateParts& operator+=(const EstimateParts& o) {
    compute_ns += o.compute_ns;
    dma_ns += o.dma_ns;
    latency_ns += o.latency_ns;
    overlap_ns += o.overlap_ns;
    return *this;
  }
};

// What the host knows about an item when it queues it.
struct ItemNote {
  uint64_t correlation = 0;  // the profiler's id of the host op queueing it
  int64_t queued_ns = 0;     // steady clock, when the host queued it
  int32_t host_thread = 0;   // the queueing thread's system id
  double flops = 0;          // arithmetic work (estimate's compute side)
  double bytes = 0;          // device-memory traffic (estimate's memory side)
  int64_t estimate_ns = -1;  // estimated Trainium time; -1: not known
  // estimate_ns's parts, when has_parts (an NKI kernel's cost model gives
  // its total only).
  EstimateParts parts;
  bool has_parts = false;
  bool tensor_engine = false;  // its flops run on the systolic array
  int element_bytes = 4;       // the dtype the flops are in
  // An adaptive-eager item (the eager items it runs are its children): the
  // id of the repeated sequence it replays, or a part of; 0 for other items.
  uint64_t adaptive_sequence = 0;
  ItemCategory category = ItemCategory::kCompute;
  // A compiled program (its steps are children): estimated as one pipeline,
  // its steps' DMA overlapping their neighbours' compute
  // (neuron_rt::programEstimate); other items with children are the sum of
  // them.
  bool pipelined = false;
  // A step that ran inside a fused step (adaptive eager): the fused step's
  // position among its item's children; -1 otherwise. Its estimate is its
  // share of the fused step's, not added to the item's.
  int32_t fused_into = -1;
  bool set = false;  // the host described the item (category, work)
  // The item computes on the host (a CPU fallback): its own run time is the
  // host's compute, added to `parts` (and estimate_ns) when it completes.
  bool host_compute = false;
  // Free-form "key=value;key=value" facts (a collective's group, size,
  // peers, sequence number). Shared: a replayed graph reuses its steps'.
  std::shared_ptr<const std::string> detail;
};

struct TraceRecord {
  int device;
  int stream;
  uint64_t seq;       // the item's sequence number on its stream
  const char* label;  // static string (op name) — lives for the process
  int64_t start_ns;   // steady clock
  int64_t end_ns;
  bool skipped;  // not run because its stream was poisoned
  // 0 for an item; for a child, its item's seq (a child is recorded while
  // its item runs, so before the item's own record).
  uint64_t parent_seq = 0;
  int child_index = -1;  // position among its item's children
  ItemNote note;
};

class Trace {
 public:
  static constexpr size_t kMaxRecords = 1 << 20;

  void enable(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void add(TraceRecord r);
  // Returns and clears the records collected so far.
  std::vector<TraceRecord> drain();
  uint64_t dropped() const { return dropped_; }

 private:
  std::atomic<bool> enabled_{false};
  std::mutex mu_;
  std::vector<TraceRecord> records_;
  uint64_t dropped_ = 0;
};

int64_t nowNs();

// ---- host side: describing the next item ----------------------------------

// The correlation id of the host op running on this thread (the profiler
// pushes one when an op starts and pops it when it ends); 0 outside one.
void pushCorrelation(uint64_t id);
void popCorrelation();
uint64_t currentCorrelation();

// The note the next item queued from this thread takes (then reset). Callers
// fill it only while tracing is enabled.
ItemNote& pendingNote();
// Moves the pending note out (with this thread's correlation and the time).
ItemNote takePendingNote();

// ---- worker side: children of the running item ----------------------------

// While a traced item runs on a worker, children record themselves against
// it: a program's steps (measured) and an NKI kernel's engines (estimated).
// Both are no-ops when the running item is not traced.
bool tracingRunningItem();
void traceChild(const char* label, int64_t start_ns, int64_t end_ns,
                ItemNote note);
// Sets the running item's estimate (an NKI kernel's cost model).
void setRunningItemEstimate(int64_t estimate_ns);

// Used by Stream's worker: the item whose children are being recorded.
struct RunningItem {
  Trace* trace = nullptr;
  int device = 0;
  int stream = 0;
  uint64_t seq = 0;
  int children = 0;
  int64_t estimate_ns = -1;
};
RunningItem& runningItem();

}  // namespace neuron_rt
