// The device timeline in torch.profiler: a Kineto activity profiler for the
// PrivateUse1 backend (PyTorch's registry forwards it to Kineto). While a
// profile with ProfilerActivity.PrivateUse1 runs, the runtime traces every
// work item; at the end each becomes a device activity on a track per
// device and stream, linked to the host op that queued it (Kineto pushes the
// op's correlation id on the op's thread; the runtime stamps it into the
// items the thread queues), with a flow arrow from a launch marker on the
// host thread. Children (a program's steps, an NKI kernel's engines) and the
// estimated-Trainium track are annotations, which torch.profiler leaves out
// of its op tables so device time is never counted twice. An adaptive-eager
// item is the other way round (its ops are the kernels, it is their range);
// a fused step inside it is a range too, around the ops it ran, each op on
// its share of the step's span.
#include <IActivityProfiler.h>
#include <c10/util/Exception.h>
#include <libkineto.h>
#include <neuron_runtime/trace.h>
#include <neuron_runtime/trainium_estimate.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>

#include "core/device.h"
#include "profiler/device_timeline.h"
#include "profiler/registration.h"

namespace torch_neuronx::profiler {
namespace {

using libkineto::ActivityType;
using libkineto::GenericTraceActivity;

// Tracks: a stream's items on tid = stream; its estimated Trainium timeline
// on tid = stream + kEstimatedTrack.
constexpr int kEstimatedTrack = 1000;

ActivityType activityTypeOf(const std::string& category) {
  if (category == "copy") return ActivityType::GPU_MEMCPY;
  return ActivityType::CONCURRENT_KERNEL;
}

// "key=value;key=value" into the activity's metadata.
void addDetail(GenericTraceActivity& a, const std::string& detail) {
  size_t at = 0;
  while (at < detail.size()) {
    size_t end = detail.find(';', at);
    if (end == std::string::npos) end = detail.size();
    const std::string kv = detail.substr(at, end - at);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos)
      a.addMetadataQuoted(kv.substr(0, eq), kv.substr(eq + 1));
    at = end + 1;
  }
}

// An estimate's parts, in us: "<prefix>compute us", "<prefix>dma us",
// "<prefix>latency us", "<prefix>overlap us".
void addParts(GenericTraceActivity& a, const neuron_rt::EstimateParts& p,
              const std::string& prefix) {
  a.addMetadata(prefix + "compute us", p.compute_ns / 1e3);
  a.addMetadata(prefix + "dma us", p.dma_ns / 1e3);
  a.addMetadata(prefix + "latency us", p.latency_ns / 1e3);
  a.addMetadata(prefix + "overlap us", p.overlap_ns / 1e3);
}

// torch.profiler takes annotation activities for its own record_function
// ranges and warns (once per process) about any it did not make: the
// children and the estimated track are ours, and left out of its tables on
// purpose. This handler drops that one message on the thread that ends the
// profile and passes every other warning on.
class AnnotationWarningFilter final : public c10::WarningHandler {
 public:
  void install() {
    c10::WarningHandler* current = c10::WarningUtils::get_warning_handler();
    if (current == this) return;
    next_ = current;
    c10::WarningUtils::set_warning_handler(this);
  }
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("not present in the set of known events") !=
        std::string::npos)
      return;
    if (next_) next_->process(warning);
  }

 private:
  c10::WarningHandler* next_ = nullptr;
};

AnnotationWarningFilter& annotationWarningFilter() {
  thread_local AnnotationWarningFilter filter;
  return filter;
}

libkineto::DeviceInfo deviceInfo(int device) {
  return libkineto::DeviceInfo{device, device,
                               "neuron:" + std::to_string(device),
                               "NeuronCore (simulated)"};
}

class NeuronSession final : public libkineto::IActivityProfilerSession {
 public:
  // torch.profiler's default activities include the device: a profile of
  // CPU code starts this session too. It never throws into Kineto: a child
  // forked after the parent used the device (where the runtime cannot start)
  // records no device items and says why in errors().
  void start() override {
    try {
      if (neuron_rt::Runtime::inBadFork())
        throw std::runtime_error(
            "neuron profiler: the device cannot be used in a process forked "
            "after its parent started the runtime; no device items recorded");
      auto& trace = runtime().trace();
      (void)trace.drain();  // what an earlier, unprofiled run left
      offset_ns_ = steadyToUnixOffsetNs();
      start_unix_ns_ = neuron_rt::nowNs() + offset_ns_;
      trace.enable(true);
      active_ = true;
      status_ = libkineto::TraceStatus::RECORDING;
    } catch (const std::exception& e) {
      errors_.push_back(e.what());
      status_ = libkineto::TraceStatus::ERROR;
    }
  }

  void stop() override {
    if (!active_) return;
    try {
      // Items still queued belong to the profile: let them finish first.
      runtime().synchronizeAll();
    } catch (const std::exception& e) {
      errors_.push_back(e.what());  // a device error: what ran is still here
    }
    runtime().trace().enable(false);
    records_ = runtime().trace().drain();
    active_ = false;
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked, int64_t,
                    int64_t) override {
    annotationWarningFilter().install();
    std::vector<DeviceItem> items =
        buildTimeline(std::move(records_), offset_ns_);
    // Kineto's logger keeps pointers to the activities; the buffer holding
    // them goes to Kineto (getTraceBuffer) and lives as long as the trace.
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->span = libkineto::TraceSpan(0, 0, "neuron");
    auto add = [&](ActivityType type,
                   const std::string& name) -> GenericTraceActivity& {
      buffer_->emplace_activity(buffer_->span, type, name);
      return *buffer_->activities.back();
    };
    const std::string target = neuron_rt::trainiumModel().name;
    const int32_t pid = static_cast<int32_t>(getpid());
    // A flow arrow joins a host op to the first item it queued (viewers pair
    // one start with one end per id); later items of the op are linked to it
    // all the same.
    std::set<uint64_t> arrowed;
    for (size_t i = 0; i < items.size(); ++i) {
      const DeviceItem& it = items[i];
      streams_.insert({it.device, it.stream});
      // An adaptive-eager item is its ops, each queued by its own host op:
      // the ops are the kernels, linked to those ops, and the combined item
      // is their range (an annotation), so every op keeps its own device
      // time in key_averages().
      const bool adaptive_range = it.parent < 0 && it.adaptive_sequence != 0;
      // A fused step (the ops it ran follow it, each its own kernel inside
      // the step's span) is a range like the adaptive item.
      const bool fused_step = it.category == "fused";
      const bool adaptive_op = it.parent >= 0 && !fused_step &&
                               items[it.parent].adaptive_sequence != 0;
      const bool child = it.parent >= 0 && !adaptive_op;
      const bool annotation = child || adaptive_range;
      const DeviceItem* fused_in =
          it.fused_into >= 0 ? &items[it.fused_into] : nullptr;
      // On the estimated track: its estimate, scaled into its item's span
      // (a pipeline's step) or its share of its fused step's.
      const int64_t estimated_span = it.estimate_span_ns;
      const libkineto::ITraceActivity* host_op =
          (linked && it.correlation)
              ? linked(static_cast<int32_t>(it.correlation))
              : nullptr;
      const bool arrow = !annotation && it.correlation && it.host_thread &&
                         arrowed.insert(it.correlation).second;
      // The measured item (an engine is an estimate only: not on this track).
      if (it.category != "engine") {
        GenericTraceActivity& a = add(annotation ? ActivityType::USER_ANNOTATION
                                                 : activityTypeOf(it.category),
                                      it.name);
        a.startTime = it.start_ns;
        a.endTime = it.end_ns;
        a.device = it.device;
        a.resource = it.stream;
        a.threadId = it.stream;
        a.addMetadata("device", it.device);
        a.addMetadata("stream", it.stream);
        a.addMetadataQuoted("category", it.category);
        if (it.estimate_ns >= 0)
          a.addMetadata("estimated " + target + " us",
                        static_cast<double>(it.estimate_ns) / 1e3);
        if (it.estimate_ns >= 0 && it.has_parts)
          addParts(a, it.parts, "estimate ");
        if (it.flops > 0) {
          a.addMetadata("flops", it.flops);
          a.addMetadataQuoted("engine", it.engine);
          a.addMetadata("element_bytes", it.element_bytes);
        }
        if (it.bytes > 0) a.addMetadata("bytes", it.bytes);
        if (it.skipped) a.addMetadata("skipped", 1);
        if (it.adaptive_sequence)
          a.addMetadata("adaptive_sequence", it.adaptive_sequence);
        if (fused_in) {
          // Its estimate above is what it would cost alone; the step's is
          // the cost, this its share of it.
          a.addMetadataQuoted("fused into", fused_in->name);
          a.addMetadata("fused share us",
                        static_cast<double>(estimated_span) / 1e3);
        }
        addDetail(a, it.detail);
        if (!annotation) {
          a.id = static_cast<int32_t>(it.correlation);
          a.addMetadata("seq", it.seq);
          if (it.correlation) {
            a.addMetadata("correlation", it.correlation);
            a.linked = host_op;
          }
        }
        if (arrow) {
          a.flow.id = static_cast<uint32_t>(it.correlation);
          a.flow.type = libkineto::kLinkAsyncCpuGpu;
          a.flow.start = 0;
        }
        a.log(logger);
      }

      // Where the arrow starts: the host thread, when it queued the item.
      if (arrow) {
        GenericTraceActivity& q =
            add(ActivityType::PRIVATEUSE1_RUNTIME, "neuron_queue_item");
        q.startTime = it.queued_ns;
        q.endTime = it.queued_ns + 1000;
        q.device = pid;
        q.resource = it.host_thread;
        q.threadId = it.host_thread;
        q.id = static_cast<int32_t>(it.correlation);
        q.linked = host_op;
        q.flow.id = static_cast<uint32_t>(it.correlation);
        q.flow.type = libkineto::kLinkAsyncCpuGpu;
        q.flow.start = 1;
        q.addMetadata("correlation", it.correlation);
        q.log(logger);
      }

      // The estimated Trainium timeline.
      if (estimated_span > 0) {
        GenericTraceActivity& e = add(ActivityType::USER_ANNOTATION, it.name);
        e.startTime = it.estimate_start_ns;
        e.endTime = it.estimate_start_ns + estimated_span;
        e.device = it.device;
        e.resource = it.stream + kEstimatedTrack;
        e.threadId = e.resource;
        e.addMetadataQuoted("category", it.category);
        e.addMetadata("measured us",
                      static_cast<double>(it.end_ns - it.start_ns) / 1e3);
        e.addMetadataQuoted("estimate", "estimated " + target + " time");
        // Why it takes that long: estimate = compute + dma + latency -
        // overlap (trainium_estimate.h).
        if (it.has_parts) addParts(e, it.parts, "");
        if (fused_in) {
          // Its parts are its own alone; the span its share of the step's.
          e.addMetadataQuoted("fused into", fused_in->name);
          e.addMetadata("alone us", static_cast<double>(it.estimate_ns) / 1e3);
        }
        e.log(logger);
      }
    }
    logger_ = &logger;
    setLastSessionItems(std::move(items));
  }

  // Kineto asks a session for one device's name (after processTrace, and
  // after its own default names, so this one stands); a process may use
  // several devices, so the others are named on the same logger here.
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    std::set<int> devices;
    for (const auto& [device, stream] : streams_) devices.insert(device);
    if (devices.empty()) return nullptr;
    if (logger_)
      for (auto it = std::next(devices.begin()); it != devices.end(); ++it)
        logger_->handleDeviceInfo(deviceInfo(*it), start_unix_ns_);
    return std::make_unique<libkineto::DeviceInfo>(
        deviceInfo(*devices.begin()));
  }

  // Each stream a thread, with its estimated-Trainium twin beside it.
  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    const std::string target = neuron_rt::trainiumModel().name;
    for (const auto& [device, stream] : streams_) {
      out.push_back(libkineto::ResourceInfo{
          stream, stream, device, "stream " + std::to_string(stream)});
      out.push_back(libkineto::ResourceInfo{
          stream + kEstimatedTrack, stream + kEstimatedTrack, device,
          "stream " + std::to_string(stream) + " (estimated " + target + ")"});
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);  // Kineto keeps it with the trace
  }

  // Ops and record_function ranges nest on a thread, so one stack serves
  // both: an item links to the innermost (its op; an NKI launch, which is no
  // op, to its "nki::<kernel>" range).
  void pushCorrelationId(uint64_t id) override {
    neuron_rt::pushCorrelation(id);
  }
  void popCorrelationId() override { neuron_rt::popCorrelation(); }
  void pushUserCorrelationId(uint64_t id) override {
    neuron_rt::pushCorrelation(id);
  }
  void popUserCorrelationId() override { neuron_rt::popCorrelation(); }

  std::string getDeviceProperties() override { return ""; }

 private:
  int64_t offset_ns_ = 0;
  int64_t start_unix_ns_ = 0;
  libkineto::ActivityLogger* logger_ = nullptr;  // processTrace's, for names
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;  // the activities
  bool active_ = false;
  std::vector<std::string> errors_;
  std::vector<neuron_rt::TraceRecord> records_;
  std::set<std::pair<int, int>> streams_;
};

const std::set<ActivityType>& neuronActivities() {
  static const std::set<ActivityType> s{
      ActivityType::PRIVATEUSE1_RUNTIME, ActivityType::PRIVATEUSE1_DRIVER,
      ActivityType::CONCURRENT_KERNEL, ActivityType::GPU_MEMCPY};
  return s;
}

class NeuronActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<ActivityType>& availableActivities() const override {
    return neuronActivities();
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& types, const libkineto::Config&) override {
    // ProfilerActivity.PrivateUse1 asks for the device's kernels and copies;
    // ProfilerActivity.CPU alone also names the host-side runtime types,
    // which is no reason to trace the device.
    if (!types.count(ActivityType::CONCURRENT_KERNEL) &&
        !types.count(ActivityType::GPU_MEMCPY))
      return nullptr;
    return std::make_unique<NeuronSession>();
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t, int64_t, const std::set<ActivityType>& types,
      const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_{"neuron"};
};

}  // namespace

void registerKinetoPlugin() {
  torch::profiler::impl::PrivateUse1ProfilerRegistry::instance()
      .registerFactory(
          [] { return std::make_unique<NeuronActivityProfiler>(); });
}

}  // namespace torch_neuronx::profiler
