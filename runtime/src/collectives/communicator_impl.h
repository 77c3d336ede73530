// communicator_*.cpp: one class, a file per concern (they sort together).
// This one, private to them: the segment's layout, the wait loop, helpers.
#pragma once

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "neuron_runtime/collectives/communicator.h"

namespace neuron_rt {
namespace collectives {

using Clock = std::chrono::steady_clock;

// The segment's atomics are shared between processes: they must be plain
// lock-free words (an address-based lock table is per process).
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<int32_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free");

// What a rank is calling, posted before a collective's first barrier so that
// every rank can check that all of them call the same thing.
struct Communicator::OpDesc {
  uint64_t seq;
  uint64_t count;
  uint64_t hash;  // of per-rank counts (V variants)
  int32_t root;
  uint8_t kind;
  uint8_t dtype;
  uint8_t op;
  uint8_t pad;
};

struct alignas(128) Communicator::RankCtrl {
  std::atomic<int32_t> pid;     // 0 until the rank has joined
  std::atomic<uint32_t> left;   // destroyed its communicator
  std::atomic<uint64_t> epoch;  // last barrier it arrived at
  // Double-buffered like the staging buffers: desc[p%2] is written before
  // barrier p and read by everyone after it.
  OpDesc desc[2];
  // Rung whenever one of this rank's mailboxes changes (data in, space
  // freed), so that a batch of sends and receives can sleep on one word.
  FutexSignal doorbell;
};

struct Communicator::Mailbox {
  alignas(64) std::atomic<uint64_t> head;  // bytes written (sender)
  FutexSignal data;                        // "head moved"
  alignas(64) std::atomic<uint64_t> tail;  // bytes consumed (receiver)
  FutexSignal space;                       // "tail moved"
};

struct Communicator::Header {
  SegmentPrologue prologue;
  int32_t world_size;
  uint32_t pad;
  uint64_t chunk_bytes;
  uint64_t staging_buffer_bytes;
  uint64_t p2p_bytes;
  uint64_t ctrl_off, box_off, staging_off, ring_off;
  alignas(64) std::atomic<uint32_t> joined;
  FutexSignal join_sig;
  alignas(64) std::atomic<int32_t> abort_by;  // 0: none, else rank + 1
  std::atomic<uint32_t> abort_reason_ready;
  // Why: the failure kind and ranks at fault as the aborting rank saw them,
  // so that every rank reports the same cause (a dead peer, a timeout).
  uint8_t abort_kind;
  int32_t abort_nranks;
  int32_t abort_ranks[16];
  char abort_reason[256];
  alignas(64) std::atomic<uint64_t> arrivals;  // barrier arrivals, all ranks
  FutexSignal barrier;  // seq: low 32 bits of the last completed epoch
};

// How often a sleeping waiter wakes to check the abort flag, its deadline
// and whether the peers it waits for are still alive.
constexpr std::chrono::milliseconds kWaitSlice{10};

inline size_t alignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

[[noreturn]] inline void invalid(const std::string& what) {
  throw CollectiveError(FailureKind::kInvalidArgument,
                        "neuron collectives: " + what);
}

// Spins for at most `spin` until done(); false if it is not done by then.
// A peer that is a few microseconds behind then costs no system call. After
// the first few hundred pauses the spin also yields: the peer we wait for
// may have been placed on our CPU (forked ranks start where their parent
// ran, other jobs compete for the cores), and a pure spin would keep it off
// that CPU for the whole spin. With no spin (more ranks than CPUs, where a
// spinning waiter would steal the CPU of the rank it waits for) it yields
// once.
template <class Done>
bool spinUntil(std::chrono::nanoseconds spin, Done done) {
  if (spin.count() <= 0) {
    sched_yield();
    return done();
  }
  const auto spin_end = Clock::now() + spin;
  for (unsigned i = 1;; ++i) {
    cpuRelax();
    if (done()) return true;
    if ((i & 63) == 0) {
      if (i >= 512) sched_yield();
      if (done()) return true;
      if (Clock::now() >= spin_end) return false;
    }
  }
}

// Every blocking wait of the communicator: spin, then sleep on `sig` in
// slices, checking between slices the abort flag, the peers' liveness and
// the deadline, so that no failure leaves a rank waiting forever.
template <class Done, class Missing>
void Communicator::waitUntil(FutexSignal& sig, Done done, Missing missing,
                             const char* verb) {
  if (done() || spinUntil(spin_, done)) return;
  auto next_check = Clock::now();
  for (;;) {
    // Read the word before the condition: a notify() in between changes it,
    // so the futex wait below returns at once instead of missing the wake.
    const uint32_t s = sig.seq.load(std::memory_order_acquire);
    if (done()) return;
    if (hdr_->abort_by.load(std::memory_order_acquire)) throwAborted();
    const auto now = Clock::now();
    if (now >= next_check) {
      std::vector<int> gone = goneAmong(missing());
      if (!gone.empty()) {
        // A rank may have arrived and then left or exited between missing()
        // and goneAmong(): it is gone only if it is still missing now that
        // we know it can no longer arrive.
        if (done()) return;
        const std::vector<int> still = missing();
        gone.erase(std::remove_if(gone.begin(), gone.end(),
                                  [&](int r) {
                                    return std::find(still.begin(), still.end(),
                                                     r) == still.end();
                                  }),
                   gone.end());
        if (!gone.empty()) failPeersGone(gone, verb);
      }
      next_check = now + kWaitSlice;
    }
    if (now >= deadline_) failTimeout(missing(), verb);
    sig.waiters.fetch_add(1, std::memory_order_seq_cst);
    if (!done())
      futexWait(
          &sig.seq, s,
          std::min<std::chrono::nanoseconds>(deadline_ - now, kWaitSlice));
    sig.waiters.fetch_sub(1, std::memory_order_seq_cst);
  }
}

}  // namespace collectives
}  // namespace neuron_rt
