// A queue of device work items, run in FIFO order by the stream's own worker
// thread (the simulated core's execution queue).
//
// Error model: an item that throws records a WorkError (which item, its label,
// the message) and poisons the stream: later compute and copy items are
// skipped, while marker items (event records and waits) still run so nothing
// waiting on them hangs. takeError() hands the error to the caller at the next
// synchronisation point and makes the stream usable again.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "neuron_runtime/adaptive_holder.h"
#include "neuron_runtime/item_batch.h"
#include "neuron_runtime/status.h"
#include "neuron_runtime/trace.h"
#include "neuron_runtime/work_capture.h"
#include "neuron_runtime/work_item.h"

namespace neuron_rt {

class CapturedWork;

struct WorkError {
  int device;
  int stream;
  uint64_t seq;
  std::string label;
  std::string message;
  // What kind of failure: kDeviceError for a plain exception, else the
  // status of the neuron_rt::Error the item threw.
  Status status = Status::kDeviceError;
  // A batch's or replayed graph's failed step (a StepError): its label, its
  // position (from 1) and what it threw; "", 0 and "" for a plain item.
  std::string step;
  int step_index = 0;
  std::string step_message;
};

// Called on a stream's worker thread when it has had no work for a while
// (200 ms after its idle spin), before it sleeps for good, so that the embedder
// can release what the thread holds while idle (the backend: its OpenMP pool).
// nullptr: none.
void setWorkerIdleHook(void (*hook)());

// Called on a worker thread before each item it runs, and before each step of
// a batch or of captured work, so that the embedder can reset what an item
// may have set for itself (the backend: the item's CPU threads). nullptr:
// none.
void setWorkerItemHook(void (*hook)());
// Runs the hook (the worker and CapturedWork call it).
void runWorkerItemHook();

// The queue and its worker. Three layers may hold an item before it is
// queued, each a class of its own: adaptive eager (AdaptiveHolder), a batch
// (ItemBatch) and a capture (WorkCapture), in that order.
class Stream final : private ItemSink {
 public:
  using Fn = WorkFn;

  Stream(int device, int id, int priority, Trace* trace);
  ~Stream();  // runs what is queued, then joins the worker
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Queues an item; returns its sequence number (1, 2, ...). `label` must
  // outlive the process (an operator name, a literal).
  uint64_t enqueue(const char* label, Fn fn,
                   ItemKind kind = ItemKind::kCompute);
  uint64_t enqueue(const char* label, TaskPtr task,
                   ItemKind kind = ItemKind::kCompute);

  // Batching (a compiled program is one work item): between
  // beginBatch(label) and endBatch(), compute and copy items queued on this
  // stream are held and then queued together as ONE item labelled `label`
  // that runs them in order; a failing one ends it, and the error names the
  // batch and the item. Whatever must not wait behind the batch flushes it
  // first, and batching goes on after: a marker (event record or wait), and
  // a host that waits (synchronize, waitFor). query() is false while items
  // are held. A new beginBatch flushes the open batch. `label` must outlive
  // the process. Items queued while batching return the sequence number of
  // the last item queued before them.
  void beginBatch(const char* label);
  void endBatch();
  bool batching() const { return batch_.open(); }

  // Capture: between beginCapture() and endCapture(), compute and copy items
  // queued on this stream (batches included) are recorded instead of run;
  // endCapture() returns them, and replay() queues them as ONE item that runs
  // them again, in order, each time it is called. Captured items must be
  // re-runnable (they run over the same memory with the same arguments).
  // While capturing, a marker (event record or wait) or a host wait
  // (synchronize, waitFor) throws Error(kCaptureInvalid) and invalidates the
  // capture: endCapture() then throws too, naming the first such call.
  // `id` (non-zero) tags the capture (the allocator keeps the memory
  // allocated during it for the replays).
  void beginCapture(uint64_t id);
  std::shared_ptr<CapturedWork> endCapture();
  bool capturing() const { return capture_.active(); }
  uint64_t captureId() const { return capture_.id(); }
  uint64_t replay(std::shared_ptr<const CapturedWork> work, const char* label);

  // Blocks the calling thread until every item queued so far has run.
  void synchronize();
  // Blocks until item `seq` has run.
  void waitFor(uint64_t seq);
  // True when every item queued so far has run.
  bool query() const;

  std::optional<WorkError> takeError();
  bool hasError() const { return poisoned_.load(std::memory_order_acquire); }

  int device() const { return device_; }
  int id() const { return id_; }
  int priority() const { return priority_; }
  uint64_t lastEnqueued() const {
    return enqueued_.load(std::memory_order_acquire);
  }
  uint64_t lastCompleted() const {
    return completed_.load(std::memory_order_acquire);
  }

 private:
  // A queued item. Host threads link nodes at the tail under append_mu_; the
  // worker follows `next` without a lock, so handing an item over costs no
  // lock shared between the two threads (a lock both took for each item was
  // the largest cost of a small op on the host). The host reclaims the nodes
  // of items that have run.
  struct Node {
    std::atomic<Node*> next{nullptr};
    uint64_t seq = 0;
    const char* label = "";
    ItemKind kind = ItemKind::kCompute;
    Fn fn;
    TaskPtr task;   // instead of fn
    ItemNote note;  // filled only while tracing
  };

  // The holding layers in order, then link().
  uint64_t append(const char* label, ItemKind kind, Fn fn, TaskPtr task);
  // Past the holding layers: records the item if capturing, else queues it.
  uint64_t link(const char* label, ItemKind kind, Fn fn, TaskPtr task,
                ItemNote* note);
  // ItemSink (what adaptive eager and a batch let go): link().
  bool tracing() const override { return trace_ && trace_->enabled(); }
  void put(WorkItem&& item) override;
  // Queues what the batch holds (if anything) as one item.
  void flushBatch();
  // A host wait: what the holding layers hold goes first; throws while
  // capturing.
  void beforeHostWait(const char* what);
  // Detaches what finished items hold (under append_mu_); the caller
  // destroys it outside the lock. What a work item captures is allocated by
  // the host thread; freeing it there keeps malloc's per-thread caches
  // effective, and destructors that queue work cannot deadlock on the lock.
  struct Reclaimed {
    Node* chain = nullptr;  // nodes no thread refers to any more
    Fn fn;                  // the payload of the last finished item
    TaskPtr task;
    ~Reclaimed();
  };
  void reclaimLocked(Reclaimed& out);
  void workerLoop();
  void startWorkerLocked();
  void destroyRetired();

  const int device_;
  const int id_;
  const int priority_;
  Trace* trace_;

  std::mutex append_mu_;  // host threads linking nodes: tail_, oldest_
  Node* const stub_;      // the worker's starting point (seq 0)
  Node* tail_;            // last linked node (append_mu_)
  Node* oldest_;          // oldest node not reclaimed (append_mu_)
  std::thread worker_;    // started under append_mu_

  // An idle worker sleeps on work_cv_; a host thread that links an item
  // while it sleeps wakes it.
  std::mutex sleep_mu_;
  std::condition_variable work_cv_;
  std::atomic<bool> worker_sleeping_{false};
  std::atomic<bool> stop_{false};

  std::atomic<uint64_t> enqueued_{0};
  std::atomic<uint64_t> completed_{0};
  std::mutex done_mu_;  // sleeping host waiters (done_cv_)
  std::condition_variable done_cv_;
  // The lowest sequence number a sleeping host thread waits for (max when
  // none): the worker wakes waiters only once that item has run, not after
  // every item (a host waiting for a long queue would otherwise be woken,
  // and the worker slowed, ~1,000 times per training step).
  std::atomic<uint64_t> wake_at_{kNobodyWaits};
  static constexpr uint64_t kNobodyWaits = ~uint64_t{0};

  // The holding layers (each locks for itself; adaptive_'s lock is held
  // while its items are linked, so it comes before append_mu_). mutable:
  // query() lets what adaptive eager holds go.
  mutable AdaptiveHolder adaptive_;
  ItemBatch batch_;
  WorkCapture capture_;

  std::atomic<bool> poisoned_{false};
  std::mutex error_mu_;  // error_
  std::optional<WorkError> error_;
};

}  // namespace neuron_rt
