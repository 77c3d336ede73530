#include "adaptive/sequence_runner.h"

#include <ATen/Parallel.h>
#include <neuron_runtime/fnv1a.h>
#include <neuron_runtime/sequence_adapter.h>
#include <neuron_runtime/sequence_fusion.h>
#include <neuron_runtime/stream.h>
#include <neuron_runtime/trainium_estimate.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "adaptive/fused_pass.h"
#include "eager/op_item.h"
#include "profiler/device_timeline.h"
#include "profiler/op_cost.h"

namespace torch_neuronx::adaptive {
namespace {

using neuron_rt::fnv1aMix;

// The plans of the parts a worker thread ran. A part is the same steps at
// each replay (its sequence's, from the same position); what can change is
// where their tensors live and which the host still held. Those decide only
// groups larger than one tile (hazards between tiles, tile buffers): a plan
// whose groups all fit one tile runs each op whole, in order, and holds at
// every replay. Those are kept (planning costs ~0.5 us per step; a small
// model's step has hundreds), the others planned again each time (their
// steps take milliseconds).
class PlanCache {
 public:
  const std::vector<FusionGroup>& planFor(const neuron_rt::CapturedWork& work,
                                          uint64_t sequence, int threads) {
    items_.clear();
    uint64_t h = fnv1aMix(neuron_rt::kFnv1aBasis, sequence);
    h = fnv1aMix(h, static_cast<uint64_t>(threads));
    for (size_t i = 0; i < work.size(); ++i) {
      auto* item = dynamic_cast<OpItem*>(work.stepTask(i));
      items_.push_back(item);
      h = fnv1aMix(h, reinterpret_cast<uintptr_t>(work.stepLabel(i)) +
                          (item ? (item->validating() ? 1 : 2) : 0));
    }
    auto it = plans_.find(h);
    if (it == plans_.end()) {
      fresh_ = planFusion(work, threads);
      const bool fits =
          std::all_of(fresh_.begin(), fresh_.end(),
                      [](const FusionGroup& g) { return g.numel <= g.tile; });
      if (!fits) return fresh_;
      if (plans_.size() >= kMaxPlans) plans_.clear();
      it = plans_.emplace(h, std::move(fresh_)).first;
    }
    // The plan's ops are this part's items.
    for (FusionGroup& g : it->second) rebind(g);
    return it->second;
  }

 private:
  void rebind(FusionGroup& g) {
    for (FusedOp& op : g.ops) op.item = items_[op.step];
    for (FusionGroup& c : g.chains) rebind(c);
  }
  static constexpr size_t kMaxPlans = 1024;
  std::unordered_map<uint64_t, std::vector<FusionGroup>> plans_;
  std::vector<FusionGroup> fresh_;
  std::vector<OpItem*> items_;
};

// One cache per stream worker (runners run on every stream's worker).
PlanCache& plans() {
  thread_local PlanCache cache;
  return cache;
}

class FusingRunner final : public neuron_rt::HeldSequenceRunner {
 public:
  void run(const neuron_rt::CapturedWork& work, const char* label,
           uint64_t sequence) override {
    if (!neuron_rt::adaptiveSettings().fuse.load(std::memory_order_relaxed)) {
      work.run(label);
      return;
    }
    // The threads an item starts with decide the kernels' chunks.
    neuron_rt::runWorkerItemHook();
    const std::vector<FusionGroup>& groups =
        plans().planFor(work, sequence, at::get_num_threads());
    auto& stats = neuron_rt::adaptiveStats();
    size_t i = 0;
    for (const FusionGroup& g : groups) {
      for (; i < g.first; ++i) work.runStep(i, label);
      neuron_rt::ItemNote note;
      if (neuron_rt::tracingRunningItem()) note = fusedNote(work, g);
      work.runFused(g.first, g.last, label,
                    neuron_rt::rangeLabel("fused", work.stepLabel(g.first),
                                          work.stepLabel(g.last - 1)),
                    std::move(note), [&] { runFusedPass(g); });
      stats.fused_groups.fetch_add(1, std::memory_order_relaxed);
      stats.fused_items.fetch_add(g.last - g.first, std::memory_order_relaxed);
      i = g.last;
    }
    for (; i < work.size(); ++i) work.runStep(i, label);
  }
};

FusingRunner g_runner;
const bool kInstalled = [] {
  neuron_rt::setHeldSequenceRunner(&g_runner);
  return true;
}();

// A stretch of memory the group touches, and what it does with it first.
struct Region {
  const char* lo;
  const char* hi;
  bool read_first = false;  // read before the group writes it
  bool written = false;
  bool held = true;  // the host still held its storage at release
  int64_t itemsize = 0;
};

}  // namespace

neuron_rt::ItemNote fusedNote(const neuron_rt::CapturedWork& work,
                              const FusionGroup& group) {
  neuron_rt::ItemWork w;
  w.launch = true;
  std::vector<Region> regions;
  int element_bytes = 0;
  group.forEachOp([&](const FusedOp& op, const FusionGroup& g) {
    w.flops += work.stepNote(op.step).flops;
    const AliasPlan& plan = op.item->operands();
    // Reads come before the op's writes.
    for (int pass = 0; pass < 2; ++pass) {
      for (int i = 0; i < plan.count(); ++i) {
        const int s = plan.storageOf(i);
        if (s < 0 || op.item->writes(i) != (pass == 1)) continue;
        const int64_t item = plan.itemsizeOf(i);
        if (!element_bytes) element_bytes = static_cast<int>(item);
        const auto [lo, hi] = operandSpan(op, i, g.numel);
        auto it = std::find_if(
            regions.begin(), regions.end(),
            [&](const Region& r) { return r.lo == lo && r.hi == hi; });
        if (it == regions.end()) {
          regions.push_back(Region{lo, hi, pass == 0, false, true, item});
          it = regions.end() - 1;
        }
        if (pass == 1) {
          it->written = true;
          it->held = plan.storageHeld(s);
        }
      }
    }
  });
  for (const Region& r : regions) {
    const double bytes = static_cast<double>(r.hi - r.lo);
    // In from HBM what it reads first; out what the host still holds.
    int times = (r.read_first ? 1 : 0) + (r.written && r.held ? 1 : 0);
    for (int k = 0; k < times; ++k)
      w.transfers.push_back(
          neuron_rt::Transfer{bytes, 0, static_cast<double>(r.itemsize)});
    w.bytes += bytes * times;
  }
  w.element_bytes = element_bytes ? element_bytes : 4;
  neuron_rt::ItemNote note;
  note.set = true;
  note.category = neuron_rt::ItemCategory::kFused;
  note.flops = w.flops;
  note.bytes = w.bytes;
  note.element_bytes = w.element_bytes;
  note.parts = neuron_rt::estimateItem(w, profiler::deviceModel());
  note.has_parts = true;
  note.estimate_ns = neuron_rt::roundedNs(note.parts);
  return note;
}

}  // namespace torch_neuronx::adaptive
