#include "profiler/device_timeline.h"

#include <neuron_runtime/trainium_estimate.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "core/device.h"

namespace torch_neuronx::profiler {
namespace {

std::mutex g_last_mu;
std::vector<DeviceItem> g_last;

// An item's own estimate, from what the host said of it.
struct OwnEstimate {
  int64_t ns = -1;  // -1: none
  neuron_rt::EstimateParts parts;
  bool has_parts = false;
};

OwnEstimate ownEstimate(const neuron_rt::ItemNote& n,
                        const neuron_rt::TrainiumModel& model) {
  if (n.estimate_ns >= 0) return {n.estimate_ns, n.parts, n.has_parts};
  using neuron_rt::ItemCategory;
  switch (n.category) {
    case ItemCategory::kMarker:
      return {0, {}, true};
    case ItemCategory::kProgram:
    case ItemCategory::kStep:
    case ItemCategory::kEngine:
      if (!n.set) return {};  // a program: from its steps
      break;
    default:
      break;
  }
  if (!n.set && n.category != ItemCategory::kCopy) return {};
  // Described but not estimated when queued: its flops and bytes.
  neuron_rt::ItemWork w;
  w.flops = n.flops;
  w.bytes = n.bytes;
  w.tensor_engine = n.tensor_engine;
  w.element_bytes = n.element_bytes;
  w.launch = n.category == ItemCategory::kCompute;
  OwnEstimate e;
  e.parts = neuron_rt::estimateItem(w, model);
  e.has_parts = true;
  e.ns = neuron_rt::roundedNs(e.parts);
  return e;
}

}  // namespace

neuron_rt::TrainiumModel deviceModel() {
  // A device is a logical core: its engines and bandwidth are its cores'.
  return neuron_rt::logicalCoreModel(
      neuron_rt::trainiumModel(),
      runtime().topology().config().logical_core_size);
}

int physicalCoresPerDevice() {
  return neuron_rt::hardwareSpec(neuron_rt::trainiumModel().target)
                 .logical_cores
             ? runtime().topology().config().logical_core_size
             : 1;
}

int64_t steadyToUnixOffsetNs() {
  // The smallest of a few samples' differences: a preemption between the
  // two clock reads only ever makes one larger.
  int64_t best = INT64_MAX;
  for (int i = 0; i < 5; ++i) {
    const int64_t steady = neuron_rt::nowNs();
    const int64_t unix_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::system_clock::now().time_since_epoch())
            .count();
    best = std::min(best, unix_ns - steady);
  }
  return best;
}

std::vector<DeviceItem> buildTimeline(std::vector<neuron_rt::TraceRecord> recs,
                                      int64_t off) {
  const int first_index = deviceNumbering().first;
  const neuron_rt::TrainiumModel model = deviceModel();
  // Items in stream order; a child is recorded before its item (it ran
  // inside it), so children are collected per (device, stream, parent).
  using Key = std::tuple<int, int, uint64_t>;
  std::map<Key, std::vector<const neuron_rt::TraceRecord*>> children;
  std::vector<const neuron_rt::TraceRecord*> items;
  for (const auto& r : recs) {
    // Queued before the profile started (the host did not describe it):
    // not part of this profile, though it ran during it.
    if (!r.parent_seq && r.note.queued_ns == 0) continue;
    if (r.parent_seq)
      children[{r.device, r.stream, r.parent_seq}].push_back(&r);
    else
      items.push_back(&r);
  }
  std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) {
    return std::tie(a->device, a->stream, a->seq) <
           std::tie(b->device, b->stream, b->seq);
  });
  auto make = [&](const neuron_rt::TraceRecord& r, int64_t parent) {
    DeviceItem d;
    d.device = r.device + first_index;
    d.stream = r.stream;
    d.seq = r.seq;
    d.name = r.label ? r.label : "";
    d.category = neuron_rt::categoryName(r.note.category);
    d.start_ns = r.start_ns + off;
    d.end_ns = r.end_ns + off;
    d.queued_ns = r.note.queued_ns ? r.note.queued_ns + off : d.start_ns;
    d.host_thread = r.note.host_thread;
    d.correlation = r.note.correlation;
    d.skipped = r.skipped;
    d.flops = r.note.flops;
    d.bytes = r.note.bytes;
    d.engine = neuron_rt::engineName(r.note.flops, r.note.tensor_engine,
                                     r.note.element_bytes);
    d.element_bytes = r.note.element_bytes;
    d.adaptive_sequence = r.note.adaptive_sequence;
    if (r.skipped) {
      d.estimate_ns = 0;
      d.parts = {};
      d.has_parts = true;
    } else {
      const OwnEstimate e = ownEstimate(r.note, model);
      d.estimate_ns = e.ns;
      d.parts = e.parts;
      d.has_parts = e.has_parts && e.ns >= 0;
    }
    d.estimate_start_ns = 0;
    d.estimate_span_ns = std::max<int64_t>(d.estimate_ns, 0);
    d.parent = parent;
    d.detail = r.note.detail ? *r.note.detail : "";
    return d;
  };
  std::vector<DeviceItem> out;
  out.reserve(recs.size());
  std::map<std::pair<int, int>, int64_t> stream_end;  // estimated timeline
  for (const auto* r : items) {
    const int64_t at = static_cast<int64_t>(out.size());
    out.push_back(make(*r, -1));
    auto it = children.find({r->device, r->stream, r->seq});  // its own only
    double child_sum = 0;
    bool child_estimates = false;
    bool child_parts = true;  // every summed child has its parts
    neuron_rt::EstimateParts parts_sum;
    std::vector<neuron_rt::EstimateParts> step_parts;
    if (it != children.end()) {
      for (const auto* c : it->second) {
        out.push_back(make(*c, at));
        DeviceItem& ci = out.back();
        if (c->note.fused_into >= 0) {
          // Inside a fused step (recorded after it): the step's estimate
          // covers it.
          ci.fused_into = at + 1 + c->note.fused_into;
          continue;
        }
        // Engines overlap inside their kernel: they are not summed.
        if (ci.estimate_ns >= 0 && ci.category != "engine") {
          child_sum += static_cast<double>(ci.estimate_ns);
          child_estimates = true;
          if (ci.has_parts) {
            parts_sum += ci.parts;
            step_parts.push_back(ci.parts);
          } else
            child_parts = false;
        }
      }
    }
    // Ops inside a fused step ran as one pass, each over the whole of the
    // step's measured span: each gets its share of that span instead, in
    // proportion to what it would cost alone (equal shares without
    // estimates), one after another, so they nest in the step and their
    // measured times add up to the step's.
    for (size_t k = at + 1; k < out.size(); ++k) {
      const DeviceItem& f = out[k];
      if (f.category != "fused") continue;
      size_t end = k + 1;
      double alone = 0;
      for (; end < out.size() && out[end].fused_into == static_cast<int64_t>(k);
           ++end)
        alone +=
            static_cast<double>(std::max<int64_t>(out[end].estimate_ns, 0));
      const size_t n = end - (k + 1);
      if (n == 0) continue;
      const double span = static_cast<double>(f.end_ns - f.start_ns);
      double done = 0;
      for (size_t j = k + 1; j < end; ++j) {
        const double w =
            alone > 0
                ? static_cast<double>(std::max<int64_t>(out[j].estimate_ns, 0))
                : 1.0;
        const double total = alone > 0 ? alone : static_cast<double>(n);
        out[j].start_ns = f.start_ns + static_cast<int64_t>(
                                           std::llround(span * done / total));
        done += w;
        out[j].end_ns =
            j + 1 == end
                ? f.end_ns
                : f.start_ns +
                      static_cast<int64_t>(std::llround(span * done / total));
      }
    }
    DeviceItem& item = out[at];
    if (item.estimate_ns < 0 && child_estimates) {
      if (r->note.pipelined && child_parts) {
        // A compiled program: one pipeline of its steps.
        item.parts = neuron_rt::programEstimate(step_parts, model);
        item.has_parts = true;
        item.estimate_ns = neuron_rt::roundedNs(item.parts);
      } else {
        item.estimate_ns = static_cast<int64_t>(child_sum);
        item.parts = parts_sum;
        item.has_parts = child_parts;
      }
    }
    // Estimated timeline: the stream's items in order, none before the host
    // queued it.
    int64_t& end = stream_end[{item.device, item.stream}];
    item.estimate_start_ns = std::max(item.queued_ns, end);
    item.estimate_span_ns = std::max<int64_t>(item.estimate_ns, 0);
    end = item.estimate_start_ns + item.estimate_span_ns;
    // Children: steps one after another from the item's estimated start;
    // an engine (recorded when its kernel finished) from the start of the
    // step it ran in, or the item's.
    // A compiled program's steps overlap (its estimate is below their sum):
    // their places are scaled into the program's span, in order.
    const double scale =
        child_sum > 0 && item.estimate_ns >= 0 &&
                static_cast<double>(item.estimate_ns) < child_sum
            ? static_cast<double>(item.estimate_ns) / child_sum
            : 1.0;
    double step_at = 0;
    for (size_t k = at + 1; k < out.size(); ++k) {
      DeviceItem& c = out[k];
      if (c.category == "engine" || c.fused_into >= 0) continue;
      c.estimate_start_ns =
          item.estimate_start_ns + static_cast<int64_t>(std::llround(step_at));
      const double span =
          scale * static_cast<double>(std::max<int64_t>(c.estimate_ns, 0));
      c.estimate_span_ns = static_cast<int64_t>(std::llround(span));
      step_at += span;
    }
    // Ops inside a fused step: one after another in the step's estimated
    // span, in proportion to what each would cost alone.
    for (size_t k = at + 1; k < out.size(); ++k) {
      const DeviceItem& f = out[k];
      if (f.category != "fused") continue;
      double alone = 0;
      for (size_t j = k + 1;
           j < out.size() && out[j].fused_into == static_cast<int64_t>(k); ++j)
        alone += static_cast<double>(std::max<int64_t>(out[j].estimate_ns, 0));
      const double share =
          alone > 0 ? static_cast<double>(f.estimate_span_ns) / alone : 0;
      double inside_at = 0;
      for (size_t j = k + 1;
           j < out.size() && out[j].fused_into == static_cast<int64_t>(k);
           ++j) {
        out[j].estimate_start_ns =
            f.estimate_start_ns + static_cast<int64_t>(std::llround(inside_at));
        const double span = share * static_cast<double>(std::max<int64_t>(
                                        out[j].estimate_ns, 0));
        out[j].estimate_span_ns = static_cast<int64_t>(std::llround(span));
        inside_at += span;
      }
    }
    for (size_t k = at + 1; k < out.size(); ++k) {
      DeviceItem& c = out[k];
      if (c.category != "engine") continue;
      c.estimate_start_ns = item.estimate_start_ns;
      for (size_t j = at + 1; j < out.size(); ++j) {
        const DeviceItem& step = out[j];
        if (step.category != "engine" && step.start_ns <= c.start_ns &&
            c.start_ns <= step.end_ns) {
          c.estimate_start_ns = step.estimate_start_ns;
          break;
        }
      }
    }
  }
  return out;
}

const std::vector<DeviceItem>& lastSessionItems() { return g_last; }

void setLastSessionItems(std::vector<DeviceItem> items) {
  std::lock_guard<std::mutex> g(g_last_mu);
  g_last = std::move(items);
}

}  // namespace torch_neuronx::profiler
