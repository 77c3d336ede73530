#include "neuron_runtime/collectives/futex_signal.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace neuron_rt {
namespace collectives {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "futex words must be plain lock-free 32-bit integers");

void futexWait(std::atomic<uint32_t>* word, uint32_t expected,
               std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) return;
  struct timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
  // Errors (EAGAIN: value changed, EINTR, ETIMEDOUT) all mean "re-check".
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected,
          &ts, nullptr, 0);
}

void futexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX,
          nullptr, nullptr, 0);
}

void FutexSignal::notify() {
  // seq_cst on both sides (here and the waiter's waiters++ / re-check) makes
  // it impossible for a sleeper to miss the change and for us to miss it.
  seq.fetch_add(1, std::memory_order_seq_cst);
  if (waiters.load(std::memory_order_seq_cst) != 0) futexWakeAll(&seq);
}

void FutexSignal::publish(uint32_t value) {
  seq.store(value, std::memory_order_seq_cst);
  if (waiters.load(std::memory_order_seq_cst) != 0) futexWakeAll(&seq);
}

}  // namespace collectives
}  // namespace neuron_rt
