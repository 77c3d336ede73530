#include "neuron_runtime/device.h"

#include <string>

#include "neuron_runtime/status.h"

namespace neuron_rt {

Device::Device(const CoreInfo& info, Trace* trace)
    : info_(info), trace_(trace), hbm_(info.index, info.hbm_bytes) {}

Device::~Device() {
  for (auto& s : streams_) delete s.load();
}

Stream& Device::stream(int id) {
  if (id < 0 || id >= kNumStreams)
    throw Error(Status::kInvalidArgument,
                "neuron:" + std::to_string(info_.index) + " has no stream " +
                    std::to_string(id));
  Stream* s = streams_[id].load(std::memory_order_acquire);
  if (s) return *s;
  std::lock_guard<std::mutex> g(mu_);
  s = streams_[id].load(std::memory_order_relaxed);
  if (!s) {
    s = new Stream(info_.index, id, priorityOf(id), trace_);
    streams_[id].store(s, std::memory_order_release);
  }
  return *s;
}

void Device::synchronize() {
  for (auto& slot : streams_)
    if (Stream* s = slot.load(std::memory_order_acquire)) s->synchronize();
}

std::optional<WorkError> Device::takeError() {
  std::optional<WorkError> first;
  for (auto& slot : streams_) {
    Stream* s = slot.load(std::memory_order_acquire);
    if (!s || !s->hasError()) continue;
    auto e = s->takeError();
    if (e && !first) first = std::move(e);
  }
  return first;
}

}  // namespace neuron_rt
