// A wake-up word in shared memory between processes.
//
// Waiters sleep on `seq` with FUTEX_WAIT (the shared, not the PRIVATE,
// variant: the word is mapped at different addresses in different
// processes); notify() bumps `seq` and issues FUTEX_WAKE only when someone
// is actually asleep, so the common case of a spinning or absent waiter
// costs no system call. The condition itself lives elsewhere (a counter, a
// ring-buffer index); the signal only says "look again".
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace neuron_rt {
namespace collectives {

struct alignas(64) FutexSignal {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> waiters;

  // Wakes every sleeper after the caller has made its condition true.
  void notify();
  // Like notify() but sets `seq` to `value` (a generation number) instead
  // of incrementing it.
  void publish(uint32_t value);
};

// Sleeps while `*word == expected`, at most `timeout`; returns early on a
// wake, a signal, or a changed value. The caller re-checks its condition.
void futexWait(std::atomic<uint32_t>* word, uint32_t expected,
               std::chrono::nanoseconds timeout);
void futexWakeAll(std::atomic<uint32_t>* word);

// One spin-loop hint (pause / yield instruction).
inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

}  // namespace collectives
}  // namespace neuron_rt
