#include "neuron_runtime/stream.h"

#include <pthread.h>
#include <sched.h>

#include <exception>
#include <string>

#include "neuron_runtime/trace.h"

namespace neuron_rt {
namespace {

// How long an idle worker keeps polling before it sleeps. Eager PyTorch code
// queues items a few microseconds apart; polling briefly avoids paying a
// futex wake-up for each of them.
constexpr int64_t kIdleSpinNs = 30'000;
// How long a host thread polls for completion before it sleeps.
constexpr int64_t kWaitSpinNs = 20'000;

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// mu_ is held only for a few pushes and pops, by the host queueing and the
// worker taking items. Blocking on it at once would cost a futex sleep here
// and a futex wake-up in the holder's unlock (a system call on the host's
// path for each op): spin briefly first.
void lockSpinning(std::unique_lock<std::mutex>& lk) {
  for (int i = 0; i < 128; ++i) {
    if (lk.try_lock()) return;
    cpuRelax();
  }
  lk.lock();
}

}  // namespace

Stream::Stream(int device, int id, int priority, Trace* trace)
    : device_(device), id_(id), priority_(priority), trace_(trace) {}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void Stream::startWorkerLocked() {
  worker_ = std::thread([this] {
    // "neuron<device>:s<stream>" in profilers and debuggers.
    std::string name =
        "neuron" + std::to_string(device_) + ":s" + std::to_string(id_);
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    workerLoop();
  });
}

void Stream::destroyRetired() {
  std::vector<Fn> done;
  std::vector<TaskPtr> done_tasks;
  {
    std::lock_guard<std::mutex> g(mu_);
    done.swap(retired_);
    done_tasks.swap(retired_tasks_);
  }
}

uint64_t Stream::enqueue(const char* label, Fn fn, ItemKind kind) {
  return enqueueItem(Item{0, label, kind, std::move(fn), nullptr});
}

uint64_t Stream::enqueue(const char* label, TaskPtr task, ItemKind kind) {
  return enqueueItem(Item{0, label, kind, nullptr, std::move(task)});
}

uint64_t Stream::enqueueItem(Item item) {
  bool wake = false;
  uint64_t seq;
  // What finished items captured is destroyed here, outside the lock.
  std::vector<Fn> done;
  std::vector<TaskPtr> done_tasks;
  {
    std::unique_lock<std::mutex> g(mu_, std::defer_lock);
    lockSpinning(g);
    if (!retired_.empty()) done.swap(retired_);
    if (!retired_tasks_.empty()) done_tasks.swap(retired_tasks_);
    // Workers start on first use so that unused pool streams cost nothing.
    if (!worker_.joinable()) startWorkerLocked();
    seq = enqueued_.load(std::memory_order_relaxed) + 1;
    item.seq = seq;
    queue_.push_back(std::move(item));
    enqueued_.store(seq, std::memory_order_release);
    wake = worker_sleeping_;
  }
  if (wake) work_cv_.notify_one();
  return seq;
}

void Stream::workerLoop() {
  Item item;
  bool have_item = false;  // taken with the previous item's retirement
  for (;;) {
    if (!have_item) {
      std::unique_lock<std::mutex> lk(mu_, std::defer_lock);
      lockSpinning(lk);
      if (queue_.empty() && !stop_) {
        lk.unlock();
        int64_t until = nowNs() + kIdleSpinNs;
        while (nowNs() < until) {
          if (enqueued_.load(std::memory_order_acquire) >
              completed_.load(std::memory_order_relaxed))
            break;
          sched_yield();
        }
        lk.lock();
        worker_sleeping_ = true;
        work_cv_.wait(lk, [this] { return !queue_.empty() || stop_; });
        worker_sleeping_ = false;
      }
      if (queue_.empty()) return;  // stop_ and drained
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    have_item = false;
    bool skip = item.kind != ItemKind::kMarker &&
                poisoned_.load(std::memory_order_acquire);
    int64_t start = trace_ && trace_->enabled() ? nowNs() : 0;
    if (!skip) {
      try {
        if (item.task)
          item.task->run();
        else
          item.fn();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> g(error_mu_);
        if (!error_)
          error_ = WorkError{device_, id_, item.seq, item.label, e.what()};
        poisoned_.store(true, std::memory_order_release);
      } catch (...) {
        std::lock_guard<std::mutex> g(error_mu_);
        if (!error_)
          error_ = WorkError{device_, id_, item.seq, item.label,
                             "unknown exception"};
        poisoned_.store(true, std::memory_order_release);
      }
    }
    if (start) {
      trace_->add(TraceRecord{device_, id_, item.seq, item.label, start,
                              nowNs(), skip});
    }
    const uint64_t seq = item.seq;
    // Hand the function (and what it captured) back to the host before
    // signalling completion, so a host that waited can drop it; take the
    // next item under the same lock.
    {
      std::unique_lock<std::mutex> lk(mu_, std::defer_lock);
      lockSpinning(lk);
      if (item.task)
        retired_tasks_.push_back(std::move(item.task));
      else
        retired_.push_back(std::move(item.fn));
      if (!queue_.empty()) {
        item = std::move(queue_.front());
        queue_.pop_front();
        have_item = true;
      }
    }
    // seq_cst pairs with the waiter's registration in wake_at_ (store then
    // load on both sides), so a sleeping waiter is never missed.
    completed_.store(seq, std::memory_order_seq_cst);
    if (wake_at_.load(std::memory_order_seq_cst) <= seq) {
      std::lock_guard<std::mutex> g(done_mu_);
      // Every sleeper wakes and registers its target again.
      wake_at_.store(kNobodyWaits, std::memory_order_seq_cst);
      done_cv_.notify_all();
    }
  }
}

void Stream::waitFor(uint64_t seq) {
  if (completed_.load(std::memory_order_acquire) >= seq) return;
  int64_t until = nowNs() + kWaitSpinNs;
  while (nowNs() < until) {
    if (completed_.load(std::memory_order_acquire) >= seq) return;
    sched_yield();
  }
  std::unique_lock<std::mutex> lk(done_mu_);
  for (;;) {
    // Register under done_mu_ (the worker resets wake_at_ under it too), then
    // check: seq_cst on both sides, so either this check sees the item done
    // or the worker sees the registration.
    uint64_t cur = wake_at_.load(std::memory_order_seq_cst);
    while (seq < cur && !wake_at_.compare_exchange_weak(
                            cur, seq, std::memory_order_seq_cst)) {
    }
    if (completed_.load(std::memory_order_seq_cst) >= seq) return;
    done_cv_.wait(lk);
  }
}

void Stream::synchronize() {
  waitFor(enqueued_.load(std::memory_order_acquire));
  // What the finished items captured (tensors, buffers) is released now, so
  // memory statistics read after a synchronisation are exact.
  destroyRetired();
}

bool Stream::query() const {
  return completed_.load(std::memory_order_acquire) >=
         enqueued_.load(std::memory_order_acquire);
}

std::optional<WorkError> Stream::takeError() {
  std::lock_guard<std::mutex> g(error_mu_);
  std::optional<WorkError> e;
  e.swap(error_);
  poisoned_.store(false, std::memory_order_release);
  return e;
}

}  // namespace neuron_rt
