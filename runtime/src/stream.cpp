#include "neuron_runtime/stream.h"

#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <exception>
#include <string>

#include "neuron_runtime/captured_work.h"
#include "neuron_runtime/device_memory_protection.h"
#include "neuron_runtime/trace.h"
#include "neuron_runtime/trainium_estimate.h"

namespace neuron_rt {
namespace {

// How long an idle worker keeps polling before it sleeps. Eager PyTorch code
// queues items a few microseconds apart; polling briefly avoids paying a
// futex wake-up for each of them.
constexpr int64_t kIdleSpinNs = 30'000;
// While adaptive eager holds items for this stream, the next part is being
// issued (64 items, ~100-200 us of host work): polling that long spares the
// host a futex wake-up per part.
constexpr int64_t kHoldingSpinNs = 300'000;
// How long a sleeping worker waits for work before it calls the idle hook:
// programs that synchronise often (every step) wake it again sooner, and
// should not pay for releasing and re-creating what the hook releases.
constexpr std::chrono::milliseconds kIdleHookDelay{200};
// How long a host thread polls for completion before it sleeps.
constexpr int64_t kWaitSpinNs = 20'000;

std::atomic<void (*)()> g_worker_idle_hook{nullptr};
std::atomic<void (*)()> g_worker_item_hook{nullptr};

}  // namespace

void setWorkerIdleHook(void (*hook)()) {
  g_worker_idle_hook.store(hook, std::memory_order_release);
}

void setWorkerItemHook(void (*hook)()) {
  g_worker_item_hook.store(hook, std::memory_order_release);
}

void runWorkerItemHook() {
  if (auto hook = g_worker_item_hook.load(std::memory_order_acquire)) hook();
}

Stream::Stream(int device, int id, int priority, Trace* trace)
    : device_(device),
      id_(id),
      priority_(priority),
      trace_(trace),
      stub_(new Node),
      tail_(stub_),
      oldest_(stub_) {}

Stream::~Stream() {
  adaptive_.release(*this);  // held items run like every other queued item
  {
    std::lock_guard<std::mutex> g(sleep_mu_);
    stop_.store(true, std::memory_order_seq_cst);
  }
  work_cv_.notify_all();
  if (worker_.joinable()) worker_.join();  // after it has run what is queued
  for (Node* n = oldest_; n;) {
    Node* next = n->next.load(std::memory_order_relaxed);
    delete n;
    n = next;
  }
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

Stream::Reclaimed::~Reclaimed() {
  while (chain) {
    Node* next = chain->next.load(std::memory_order_relaxed);
    delete chain;
    chain = next;
  }
}

void Stream::reclaimLocked(Reclaimed& out) {
  const uint64_t done = completed_.load(std::memory_order_acquire);
  // Nodes before the last finished one: the worker has moved past them.
  Node* first = oldest_;
  Node* last = nullptr;
  while (oldest_->seq < done) {
    last = oldest_;
    oldest_ = oldest_->next.load(std::memory_order_relaxed);
  }
  if (last) {
    last->next.store(nullptr, std::memory_order_relaxed);
    out.chain = first;
  }
  // The last finished node stays (the worker reads its `next`); what its
  // item holds goes.
  if (oldest_->seq <= done) {
    out.fn = std::move(oldest_->fn);
    out.task = std::move(oldest_->task);
  }
}

void Stream::destroyRetired() {
  Reclaimed reclaimed;
  std::lock_guard<std::mutex> g(append_mu_);
  reclaimLocked(reclaimed);
}

uint64_t Stream::enqueue(const char* label, Fn fn, ItemKind kind) {
  return append(label, kind, std::move(fn), nullptr);
}

uint64_t Stream::enqueue(const char* label, TaskPtr task, ItemKind kind) {
  return append(label, kind, nullptr, std::move(task));
}

void Stream::put(WorkItem&& item) {
  link(item.label, item.kind, std::move(item.fn), std::move(item.task),
       tracing() ? &item.note : nullptr);
}

void Stream::beginBatch(const char* label) {
  ItemNote note;
  if (tracing()) {
    note = takePendingNote();
    if (!note.set) note.category = ItemCategory::kProgram;
  }
  WorkItem flushed;
  if (batch_.begin(label, std::move(note), &flushed)) put(std::move(flushed));
}

void Stream::endBatch() {
  WorkItem flushed;
  if (batch_.end(&flushed)) put(std::move(flushed));
}

void Stream::flushBatch() {
  WorkItem flushed;
  if (batch_.take(&flushed)) put(std::move(flushed));
}

namespace {

ItemNote noteFor(ItemKind kind) {
  ItemNote note = takePendingNote();
  if (!note.set) {
    if (kind == ItemKind::kMarker) note.category = ItemCategory::kMarker;
    if (kind == ItemKind::kCopy) note.category = ItemCategory::kCopy;
  }
  return note;
}

}  // namespace

uint64_t Stream::append(const char* label, ItemKind kind, Fn fn, TaskPtr task) {
  // The host's description of the item, taken before anything else queues.
  ItemNote note;
  const bool traced = tracing();
  if (traced) note = noteFor(kind);
  if (adaptive_.engaged() || batch_.open()) {
    // A layer may hold the item (rare: the plain path below moves nothing
    // into a WorkItem).
    WorkItem item{label, kind, std::move(fn), std::move(task), std::move(note)};
    if (adaptive_.engaged()) {
      const uint64_t signature = takeItemSignature();
      const bool boundary =
          kind == ItemKind::kMarker || batching() || capturing() ||
          !adaptiveSettings().enabled.load(std::memory_order_relaxed);
      if (adaptive_.offer(item, signature, boundary, *this))
        return enqueued_.load(std::memory_order_acquire);
    }
    if (kind != ItemKind::kMarker) {
      if (batch_.hold(item)) return enqueued_.load(std::memory_order_acquire);
    } else if (batching()) {
      flushBatch();  // the marker goes after what was held
    }
    return link(item.label, item.kind, std::move(item.fn), std::move(item.task),
                traced ? &item.note : nullptr);
  }
  return link(label, kind, std::move(fn), std::move(task),
              traced ? &note : nullptr);
}

uint64_t Stream::replay(std::shared_ptr<const CapturedWork> work,
                        const char* label) {
  if (!work) throw Error(Status::kInvalidArgument, "replay of no work");
  return append(label, ItemKind::kCompute, nullptr,
                replayTask(std::move(work), label));
}

void Stream::beginCapture(uint64_t id) {
  if (id == 0) throw Error(Status::kInvalidArgument, "capture id must be > 0");
  // What adaptive eager holds was queued before: not captured.
  if (adaptive_.holding()) adaptive_.boundary(*this);
  flushBatch();
  capture_.begin(id);
}

std::shared_ptr<CapturedWork> Stream::endCapture() {
  flushBatch();  // a program still open is part of the capture
  return capture_.end();
}

uint64_t Stream::link(const char* label, ItemKind kind, Fn fn, TaskPtr task,
                      ItemNote* note) {
  if (capture_.active()) {
    if (kind == ItemKind::kMarker) capture_.reject(label);  // event record/wait
    if (capture_.record(label, fn, task, note))
      return enqueued_.load(std::memory_order_acquire);
  }
  Node* node = new Node;
  node->label = label;
  node->kind = kind;
  node->fn = std::move(fn);
  node->task = std::move(task);
  if (note) node->note = std::move(*note);
  uint64_t seq;
  Reclaimed reclaimed;  // destroyed after the lock is released
  {
    std::lock_guard<std::mutex> g(append_mu_);
    reclaimLocked(reclaimed);
    // Workers start on first use so that unused pool streams cost nothing.
    if (!worker_.joinable()) startWorkerLocked();
    seq = enqueued_.load(std::memory_order_relaxed) + 1;
    node->seq = seq;
    enqueued_.store(seq, std::memory_order_release);
    // seq_cst pairs with the worker's sleep (store worker_sleeping_, then
    // load next): either it sees this node or this thread sees it asleep.
    tail_->next.store(node, std::memory_order_seq_cst);
    tail_ = node;
  }
  if (worker_sleeping_.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> g(sleep_mu_);
    work_cv_.notify_one();
  }
  return seq;
}

void Stream::workerLoop() {
  // Device memory protection: the worker opens device memory for a run of
  // items and closes it when its queue is empty, before it reports the last
  // item done (a host that then reads device memory by accident faults).
  const bool protect = deviceMemoryProtected();
  bool access_open = false;
  Node* cur = stub_;
  for (;;) {
    Node* item = cur->next.load(std::memory_order_acquire);
    if (!item) {
      int64_t until =
          nowNs() + (adaptive_.holding() ? kHoldingSpinNs : kIdleSpinNs);
      while (nowNs() < until) {
        if ((item = cur->next.load(std::memory_order_acquire))) break;
        sched_yield();
      }
    }
    if (!item) {
      std::unique_lock<std::mutex> lk(sleep_mu_);
      worker_sleeping_.store(true, std::memory_order_seq_cst);
      auto ready = [&] {
        item = cur->next.load(std::memory_order_seq_cst);
        return item || stop_.load(std::memory_order_seq_cst);
      };
      if (!work_cv_.wait_for(lk, kIdleHookDelay, ready)) {
        // Idle for a while: let the embedder release what the thread holds.
        // A host that links an item meanwhile sees worker_sleeping_ and
        // notifies; the wait below checks for the item first.
        if (auto hook = g_worker_idle_hook.load(std::memory_order_acquire)) {
          lk.unlock();
          hook();
          lk.lock();
        }
        work_cv_.wait(lk, ready);
      }
      worker_sleeping_.store(false, std::memory_order_relaxed);
      if (!item) return;  // stopping, and everything queued has run
    }
    bool skip = item->kind != ItemKind::kMarker &&
                poisoned_.load(std::memory_order_acquire);
    if (protect && !skip && !access_open) {
      DeviceMemoryAccess::open();
      access_open = true;
    }
    runWorkerItemHook();
    int64_t start = tracing() ? nowNs() : 0;
    if (start) runningItem() = RunningItem{trace_, device_, id_, item->seq};
    if (!skip) {
      try {
        if (item->task)
          item->task->run();
        else
          item->fn();
      } catch (const Error& e) {
        std::lock_guard<std::mutex> g(error_mu_);
        if (!error_) {
          error_ = WorkError{device_,     id_,      item->seq,
                             item->label, e.what(), e.status()};
          if (const auto* op = dynamic_cast<const OpError*>(&e)) {
            error_->label = op->op();
          } else if (const auto* step = dynamic_cast<const StepError*>(&e)) {
            error_->step = step->step();
            error_->step_index = step->index();
            error_->step_message = step->stepMessage();
          }
        }
        poisoned_.store(true, std::memory_order_release);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> g(error_mu_);
        if (!error_)
          error_ = WorkError{device_, id_, item->seq, item->label, e.what()};
        poisoned_.store(true, std::memory_order_release);
      } catch (...) {
        std::lock_guard<std::mutex> g(error_mu_);
        if (!error_)
          error_ = WorkError{device_, id_, item->seq, item->label,
                             "unknown exception"};
        poisoned_.store(true, std::memory_order_release);
      }
    }
    if (start) {
      TraceRecord rec{device_, id_,  item->seq, item->label, start,
                      nowNs(), skip, 0,         -1,          {}};
      rec.note = std::move(item->note);
      if (rec.note.host_compute && rec.note.has_parts) {
        rec.note.parts.compute_ns += static_cast<double>(rec.end_ns - start);
        rec.note.estimate_ns = roundedNs(rec.note.parts);
      }
      if (runningItem().estimate_ns >= 0) {
        rec.note.estimate_ns = runningItem().estimate_ns;
        rec.note.has_parts = false;  // a cost model's total
      }
      runningItem() = RunningItem{};
      trace_->add(std::move(rec));
    }
    if (access_open && !item->next.load(std::memory_order_acquire)) {
      DeviceMemoryAccess::close();
      access_open = false;
    }
    const uint64_t seq = item->seq;
    cur = item;  // from here on the worker reads only cur->next
    // The item's function and captures are dropped by the host (the next
    // enqueue, or a synchronize that waited for it).
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

void Stream::beforeHostWait(const char* what) {
  capture_.reject(what);
  if (adaptive_.engaged())
    adaptive_.boundary(*this);   // a held item may be what is waited for
  if (batching()) flushBatch();  // a held item may be what is waited for
}

void Stream::waitFor(uint64_t seq) {
  beforeHostWait("a host wait for the stream");
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
  beforeHostWait("a stream synchronize");
  waitFor(enqueued_.load(std::memory_order_acquire));
  // What the finished items captured (tensors, buffers) is released now, so
  // memory statistics read after a synchronisation are exact.
  destroyRetired();
}

bool Stream::query() const {
  // Held items would never run if the host polled for them: a poll lets
  // them go (a boundary: the sequence was not complete).
  auto* self = const_cast<Stream*>(this);
  if (adaptive_.boundaryIfHolding(*self)) return false;
  if (batching() && batch_.holdsItems()) return false;
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
