// One visible logical NeuronCore: its HBM arena and its streams.
//
// Stream ids: 0 is the default stream, 1..kPoolSize the normal-priority pool,
// kPoolSize+1..2*kPoolSize the high-priority pool. Streams are created on
// first use.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "neuron_runtime/hbm_arena.h"
#include "neuron_runtime/stream.h"
#include "neuron_runtime/topology.h"

namespace neuron_rt {

class Trace;

class Device {
 public:
  static constexpr int kPoolSize = 16;
  static constexpr int kNumStreams = 1 + 2 * kPoolSize;

  Device(const CoreInfo& info, Trace* trace);
  ~Device();

  int index() const { return info_.index; }
  const CoreInfo& info() const { return info_; }
  HbmArena& hbm() { return hbm_; }

  // Throws neuron_rt::Error(kInvalidArgument) for an id out of range.
  Stream& stream(int id);
  Stream& defaultStream() { return stream(0); }
  static int priorityOf(int stream_id) {
    return stream_id > kPoolSize ? -1 : 0;
  }

  // Waits for every stream of this device.
  void synchronize();
  // The first pending error of any stream of this device (and clears it).
  std::optional<WorkError> takeError();

 private:
  CoreInfo info_;
  Trace* trace_;
  HbmArena hbm_;
  std::mutex mu_;
  std::array<std::atomic<Stream*>, kNumStreams> streams_{};
};

}  // namespace neuron_rt
