#include "neuron_runtime/collectives/communicator.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "neuron_runtime/collectives/reduce.h"

// Why one barrier per step is enough (the staging invariant).
// Step p is "write your own half p%2, barrier p, read anyone's half p%2".
// A rank starts writing half p%2 again in step p+2, i.e. after it has passed
// barrier p+1. Every rank arrives at barrier p+1 only after finishing its
// reads of step p, so nobody still reads what is overwritten. The reduced
// slices of an all-reduce are written after barrier p into the *next* half
// (p+1)%2, which is the same rule one step early: the readers of that half
// (step p-1) all arrived at barrier p before we passed it.

namespace neuron_rt {
namespace collectives {

using Clock = std::chrono::steady_clock;

// The segment's atomics are shared between processes: they must be plain
// lock-free words (an address-based lock table is per process).
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<int32_t>::is_always_lock_free,
              "shared-memory atomics must be lock-free");

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
  // Double-buffered like the staging halves: desc[p%2] is written before
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
  uint64_t half_bytes;
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

namespace {

enum Kind : uint8_t {
  kAllReduce = 1,
  kReduce,
  kBroadcast,
  kAllGatherV,
  kGatherV,
  kScatterV,
  kReduceScatterV,
  kAllToAllV,
  kBarrier,
};

const char* kindName(int k) {
  switch (k) {
    case kAllReduce:
      return "allReduce";
    case kReduce:
      return "reduce";
    case kBroadcast:
      return "broadcast";
    case kAllGatherV:
      return "allGather";
    case kGatherV:
      return "gather";
    case kScatterV:
      return "scatter";
    case kReduceScatterV:
      return "reduceScatter";
    case kAllToAllV:
      return "allToAll";
    case kBarrier:
      return "barrier";
  }
  return "?";
}

constexpr uint32_t kMsgMagic = 0x4D534731;  // "MSG1"
struct MsgHeader {
  uint32_t magic;
  int32_t tag;
  uint64_t bytes;
};

// How often a sleeping waiter wakes to check the abort flag, its deadline
// and whether the peers it waits for are still alive.
constexpr std::chrono::milliseconds kWaitSlice{10};

size_t alignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }
size_t ceilDiv(size_t a, size_t b) { return (a + b - 1) / b; }

uint64_t hashCounts(const std::vector<size_t>& v) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t x : v) {
    h ^= x;
    h *= 1099511628211ull;
  }
  return h;
}

std::string joinRanks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i)
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s.empty() ? "none" : s;
}

std::string describe(const Communicator::OpDesc& d);

[[noreturn]] void invalid(const std::string& what) {
  throw CollectiveError(FailureKind::kInvalidArgument,
                        "neuron collectives: " + what);
}

int cpusAvailable() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

std::string describe(const Communicator::OpDesc& d) {
  std::string s = std::string(kindName(d.kind)) + "(";
  if (d.kind == kBarrier || d.kind == kAllToAllV) return s + ")";
  s += "count " + std::to_string(d.count) + ", " +
       dtypeName(static_cast<DataType>(d.dtype));
  if (d.kind == kAllReduce || d.kind == kReduce || d.kind == kReduceScatterV)
    s += std::string(", ") + reduceOpName(static_cast<ReduceOp>(d.op));
  if (d.root >= 0) s += ", root " + std::to_string(d.root);
  if (d.hash) s += ", per-rank counts #" + std::to_string(d.hash % 100000);
  return s + ")";
}

}  // namespace

// ---------------------------------------------------------------- set-up

std::unique_ptr<Communicator> Communicator::create(const std::string& name,
                                                   int rank, int world_size,
                                                   const CommOptions& options) {
  if (name.empty() || name.size() > 200 ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                             "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
          std::string::npos)
    invalid("communicator name '" + name +
            "' must be 1-200 characters of [A-Za-z0-9._-]");
  if (world_size < 1 || world_size > 1024)
    invalid("world size " + std::to_string(world_size) +
            " is out of range [1, 1024]");
  if (rank < 0 || rank >= world_size)
    invalid("rank " + std::to_string(rank) +
            " is out of range for world size " + std::to_string(world_size));
  if (options.timeout.count() <= 0) invalid("timeout must be positive");
  std::unique_ptr<Communicator> c(new Communicator);
  c->name_ = name;
  c->rank_ = rank;
  c->world_ = world_size;
  c->timeout_ = options.timeout;
  c->join(options);
  return c;
}

void Communicator::join(const CommOptions& options) {
  op_name_ = "create";
  deadline_ = Clock::now() + timeout_;
  const std::string shm = ShmSegment::shmName(name_);
  const int n = world_;
  if (rank_ == 0) {
    if (options.cleanup_stale) ShmSegment::cleanupStale();
    // The staging half holds an all-reduce chunk and its reduced slices;
    // all-to-all also needs room for the size matrix row and N sub-areas.
    const size_t wanted = options.chunk_bytes != 0 ? options.chunk_bytes
                          : n <= cpusAvailable()   ? size_t{1} << 20
                                                   : size_t{4} << 20;
    const size_t chunk =
        alignUp(std::max({wanted, size_t{64} << 10, size_t(n) * 256}), 4096);
    size_t p2p = options.p2p_bytes;
    const size_t pairs = size_t(n) * size_t(n - 1);
    if (p2p == 0) {
      p2p = size_t{256} << 10;
      if (pairs && pairs * p2p > (size_t{64} << 20))
        p2p = std::max(size_t{16} << 10, (size_t{64} << 20) / pairs);
    }
    p2p = alignUp(std::max(p2p, size_t{4096}), 4096);
    const size_t half = 2 * chunk;
    size_t off = alignUp(sizeof(Header), 4096);
    const size_t ctrl_off = off;
    off = alignUp(off + n * sizeof(RankCtrl), 4096);
    const size_t box_off = off;
    off = alignUp(off + pairs * sizeof(Mailbox), 4096);
    const size_t staging_off = off;
    off += size_t(n) * 2 * half;
    const size_t ring_off = off;
    off += pairs * p2p;
    seg_ = ShmSegment::create(shm, alignUp(off, 4096));
    auto* h = static_cast<Header*>(seg_.data());
    h->world_size = n;
    h->chunk_bytes = chunk;
    h->half_bytes = half;
    h->p2p_bytes = p2p;
    h->ctrl_off = ctrl_off;
    h->box_off = box_off;
    h->staging_off = staging_off;
    h->ring_off = ring_off;
    seg_.publish();
  } else {
    // Wait for rank 0 to create and publish the segment.
    for (;;) {
      if (!seg_.data()) ShmSegment::tryOpen(shm, &seg_);
      if (seg_.published()) {
        const int creator = seg_.prologue()->creator_pid;
        if (processAlive(creator)) break;
        seg_.unlink();  // left over by a dead job of the same name
        seg_ = ShmSegment();
      }
      if (Clock::now() >= deadline_)
        throw CollectiveError(
            FailureKind::kTimeout,
            "neuron collectives: rank " + std::to_string(rank_) +
                " timed out after " +
                std::to_string(
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        timeout_)
                        .count()) +
                " ms waiting for rank 0 to create communicator '" + name_ +
                "' (shared memory " + shm + ")",
            {0});
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  hdr_ = static_cast<Header*>(seg_.data());
  if (hdr_->world_size != n) {
    const int theirs = hdr_->world_size;
    hdr_ = nullptr;
    throw CollectiveError(FailureKind::kSetup,
                          "neuron collectives: rank " + std::to_string(rank_) +
                              " joined communicator '" + name_ +
                              "' with world size " + std::to_string(n) +
                              ", but rank 0 created it for " +
                              std::to_string(theirs) + " ranks",
                          {0});
  }
  char* base = static_cast<char*>(seg_.data());
  ctrl_ = reinterpret_cast<RankCtrl*>(base + hdr_->ctrl_off);
  boxes_ = reinterpret_cast<Mailbox*>(base + hdr_->box_off);
  staging_ = base + hdr_->staging_off;
  rings_ = base + hdr_->ring_off;
  chunk_bytes_ = hdr_->chunk_bytes;
  half_bytes_ = hdr_->half_bytes;
  p2p_bytes_ = hdr_->p2p_bytes;
  small_bytes_ = std::min(options.small_bytes, chunk_bytes_);
  const int cpus = cpusAvailable();
  spin_ = std::chrono::microseconds(
      options.spin_us >= 0 ? options.spin_us : (n <= cpus ? 50 : 0));

  int32_t expected = 0;
  if (!ctrl_[rank_].pid.compare_exchange_strong(
          expected, static_cast<int32_t>(getpid()))) {
    const int other = expected;
    ctrl_ = nullptr;
    hdr_ = nullptr;
    throw CollectiveError(FailureKind::kSetup,
                          "neuron collectives: rank " + std::to_string(rank_) +
                              " of communicator '" + name_ +
                              "' was already taken by process " +
                              std::to_string(other));
  }
  hdr_->joined.fetch_add(1, std::memory_order_acq_rel);
  hdr_->join_sig.notify();
  waitUntil(
      hdr_->join_sig,
      [&] {
        return hdr_->joined.load(std::memory_order_acquire) >= uint32_t(n);
      },
      [&] {
        std::vector<int> m;
        for (int r = 0; r < n; ++r)
          if (ctrl_[r].pid.load(std::memory_order_acquire) == 0) m.push_back(r);
        return m;
      },
      "join");
  // Everyone has mapped the segment: remove its name now, so that nothing is
  // left in /dev/shm however the processes end.
  seg_.unlink();
}

Communicator::~Communicator() {
  // Peers still waiting for this rank fail at once instead of timing out.
  if (ctrl_) ctrl_[rank_].left.store(1, std::memory_order_release);
}

// ----------------------------------------------------- errors and waiting

void Communicator::beginOp(const char* what) {
  if (!broken_.empty())
    throw CollectiveError(
        broken_kind_,
        "neuron collectives: " + std::string(what) + " on communicator '" +
            name_ +
            "' after an earlier fatal error; create a new communicator. "
            "Earlier error: " +
            broken_);
  if (hdr_->abort_by.load(std::memory_order_acquire)) {
    op_name_ = what;
    throwAborted();
  }
  op_name_ = what;
  deadline_ = Clock::now() + timeout_;
}

void Communicator::fail(FailureKind kind, const std::string& message,
                        std::vector<int> ranks) {
  const std::string msg = "neuron collectives: " + message;
  const bool fatal =
      kind != FailureKind::kMismatch && kind != FailureKind::kInvalidArgument;
  if (fatal) {
    broken_ = msg;
    broken_kind_ = kind;
    // Make every other rank fail fast rather than wait for its own timeout.
    if (hdr_ && kind != FailureKind::kAborted) abortWith(kind, message, ranks);
  }
  throw CollectiveError(kind, msg, std::move(ranks));
}

void Communicator::throwAborted() {
  const int by = hdr_->abort_by.load(std::memory_order_acquire) - 1;
  std::string reason;
  if (hdr_->abort_reason_ready.load(std::memory_order_acquire))
    reason =
        std::string(hdr_->abort_reason,
                    strnlen(hdr_->abort_reason, sizeof hdr_->abort_reason));
  FailureKind kind = FailureKind::kAborted;
  std::vector<int> ranks{by};
  if (hdr_->abort_reason_ready.load(std::memory_order_acquire)) {
    kind = static_cast<FailureKind>(hdr_->abort_kind);
    if (kind != FailureKind::kAborted)
      ranks.assign(hdr_->abort_ranks, hdr_->abort_ranks + hdr_->abort_nranks);
  }
  const std::string msg = std::string(op_name_) + " on rank " +
                          std::to_string(rank_) + ": communicator '" + name_ +
                          "' was aborted by rank " + std::to_string(by) +
                          (reason.empty() ? "" : ": " + reason);
  // Fatal here too, but no need to abort again.
  broken_ = "neuron collectives: " + msg;
  broken_kind_ = kind;
  throw CollectiveError(kind, broken_, ranks);
}

void Communicator::abort(const std::string& reason) {
  abortWith(FailureKind::kAborted, reason, {});
}

void Communicator::abortWith(FailureKind kind, const std::string& reason,
                             const std::vector<int>& ranks) {
  if (!hdr_) return;
  int32_t expected = 0;
  if (hdr_->abort_by.compare_exchange_strong(expected, rank_ + 1)) {
    hdr_->abort_kind = static_cast<uint8_t>(kind);
    hdr_->abort_nranks =
        static_cast<int32_t>(std::min<size_t>(ranks.size(), 16));
    for (int i = 0; i < hdr_->abort_nranks; ++i)
      hdr_->abort_ranks[i] = ranks[i];
    const size_t n = std::min(reason.size(), sizeof hdr_->abort_reason - 1);
    std::memcpy(hdr_->abort_reason, reason.data(), n);
    hdr_->abort_reason[n] = '\0';
    hdr_->abort_reason_ready.store(1, std::memory_order_release);
  }
  // Wake every sleeper without touching the words' values (the barrier's is a
  // generation number); a waiter that misses this wake sees the flag after
  // at most one wait slice.
  futexWakeAll(&hdr_->barrier.seq);
  futexWakeAll(&hdr_->join_sig.seq);
  for (int r = 0; r < world_; ++r) futexWakeAll(&ctrl_[r].doorbell.seq);
  for (size_t i = 0; i < size_t(world_) * size_t(world_ - 1); ++i) {
    futexWakeAll(&boxes_[i].data.seq);
    futexWakeAll(&boxes_[i].space.seq);
  }
}

bool Communicator::aborted() const {
  return !broken_.empty() ||
         (hdr_ && hdr_->abort_by.load(std::memory_order_acquire) != 0);
}

template <class Done, class Missing>
void Communicator::waitUntil(FutexSignal& sig, Done done, Missing missing,
                             const char* verb) {
  if (done()) return;
  // Short spin: a peer that is a few microseconds behind costs no system
  // call. With more ranks than CPUs a spinning waiter would steal the CPU of
  // the rank it waits for, so then it yields once and sleeps.
  // After the first few hundred pauses the spin also yields: the peer we
  // wait for may have been placed on our CPU (forked ranks start where their
  // parent ran, other jobs compete for the cores), and a pure spin would
  // keep it off that CPU for the whole spin.
  if (spin_.count() > 0) {
    const auto spin_end = Clock::now() + spin_;
    for (unsigned i = 1;; ++i) {
      cpuRelax();
      if (done()) return;
      if ((i & 63) == 0) {
        if (i >= 512) sched_yield();
        if (done()) return;
        if (Clock::now() >= spin_end) break;
      }
    }
  } else {
    sched_yield();
    if (done()) return;
  }
  auto next_check = Clock::now();
  for (;;) {
    const uint32_t s = sig.seq.load(std::memory_order_acquire);
    if (done()) return;
    if (hdr_->abort_by.load(std::memory_order_acquire)) throwAborted();
    const auto now = Clock::now();
    if (now >= next_check) {
      auto isGone = [&](int r) {
        const int pid = ctrl_[r].pid.load(std::memory_order_acquire);
        return ctrl_[r].left.load(std::memory_order_acquire) ||
               (pid != 0 && !processAlive(pid));
      };
      std::vector<int> gone;
      for (int r : missing())
        if (isGone(r)) gone.push_back(r);
      // A rank may have arrived and then left or exited between missing()
      // and isGone(): it is gone only if it is still missing now that we
      // know it can no longer arrive.
      if (!gone.empty()) {
        if (done()) return;
        const std::vector<int> still = missing();
        gone.erase(std::remove_if(gone.begin(), gone.end(),
                                  [&](int r) {
                                    return std::find(still.begin(), still.end(),
                                                     r) == still.end();
                                  }),
                   gone.end());
      }
      std::string pids;
      for (int r : gone)
        pids += (pids.empty() ? "" : ", ") + std::string("rank ") +
                std::to_string(r) + " (pid " +
                std::to_string(ctrl_[r].pid.load()) +
                (ctrl_[r].left.load() ? ") destroyed its communicator"
                                      : ") exited");
      if (!gone.empty())
        fail(FailureKind::kPeerDied,
             std::string(op_name_) + " on rank " + std::to_string(rank_) +
                 " of " + std::to_string(world_) + " (communicator '" + name_ +
                 "'): " + pids + " while rank " + std::to_string(rank_) +
                 " waited for it to " + verb,
             gone);
      next_check = now + kWaitSlice;
    }
    if (now >= deadline_) {
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(timeout_);
      std::vector<int> m = missing();
      fail(FailureKind::kTimeout,
           std::string(op_name_) + " on rank " + std::to_string(rank_) +
               " of " + std::to_string(world_) + " (communicator '" + name_ +
               "') timed out after " + std::to_string(ms.count()) +
               " ms; ranks that did not " + verb + ": " + joinRanks(m) +
               " (hung, busy elsewhere, or calling a different collective; "
               "raise the timeout if they are just slow)",
           m);
    }
    sig.waiters.fetch_add(1, std::memory_order_seq_cst);
    if (!done())
      futexWait(
          &sig.seq, s,
          std::min<std::chrono::nanoseconds>(deadline_ - now, kWaitSlice));
    sig.waiters.fetch_sub(1, std::memory_order_seq_cst);
  }
}

// ------------------------------------------------------------ the steps

char* Communicator::half(int rank, int h) const {
  return staging_ + (size_t(rank) * 2 + size_t(h)) * half_bytes_;
}

void Communicator::postDesc(const OpDesc& d) {
  ctrl_[rank_].desc[nextHalf()] = d;
}

void Communicator::stepBarrier() {
  const uint64_t e = ++epoch_;
  ctrl_[rank_].epoch.store(e, std::memory_order_release);
  // acq_rel RMWs chain every arrival's writes to the last arriver, whose
  // publish (seq_cst store) the waiters acquire.
  const uint64_t arrived =
      hdr_->arrivals.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (arrived == e * uint64_t(world_)) {
    hdr_->barrier.publish(static_cast<uint32_t>(e));
    return;
  }
  waitUntil(
      hdr_->barrier,
      [&] {
        return static_cast<int32_t>(
                   hdr_->barrier.seq.load(std::memory_order_acquire) -
                   static_cast<uint32_t>(e)) >= 0;
      },
      [&] {
        std::vector<int> m;
        for (int r = 0; r < world_; ++r)
          if (ctrl_[r].epoch.load(std::memory_order_acquire) < e)
            m.push_back(r);
        return m;
      },
      "arrive");
}

void Communicator::checkDescs(const OpDesc& d) {
  (void)d;
  const int h = curHalf();
  const OpDesc& ref = ctrl_[0].desc[h];
  std::vector<int> bad;
  std::string detail;
  for (int r = 1; r < world_; ++r) {
    const OpDesc& o = ctrl_[r].desc[h];
    if (o.kind != ref.kind || o.count != ref.count || o.hash != ref.hash ||
        o.root != ref.root || o.dtype != ref.dtype || o.op != ref.op) {
      bad.push_back(r);
      detail += "; rank " + std::to_string(r) + " called " + describe(o);
    }
  }
  if (!bad.empty())
    fail(FailureKind::kMismatch,
         std::string(op_name_) + " (collective #" + std::to_string(d.seq) +
             " on communicator '" + name_ +
             "'): ranks disagree: rank 0 called " + describe(ref) + detail,
         bad);
}

// ----------------------------------------------------------- collectives

void Communicator::allReduce(const void* in, void* out, size_t count,
                             DataType dtype, ReduceOp op, double factor) {
  beginOp("allReduce");
  reduceImpl(in, out, count, dtype, op, -1, factor, true);
}

void Communicator::reduce(const void* in, void* out, size_t count,
                          DataType dtype, ReduceOp op, int root,
                          double factor) {
  beginOp("reduce");
  if (root < 0 || root >= world_)
    invalid("reduce: root " + std::to_string(root) + " is out of range");
  reduceImpl(in, out, count, dtype, op, root, factor, false);
}

void Communicator::reduceImpl(const void* in, void* out, size_t count,
                              DataType dtype, ReduceOp op, int root,
                              double factor, bool all) {
  const std::string why = checkReduce(dtype, op);
  if (!why.empty()) invalid(std::string(op_name_) + ": " + why);
  const bool writer = all || rank_ == root;
  if (count && (!in || (writer && !out)))
    invalid(std::string(op_name_) + ": null buffer");
  const size_t esz = dtypeSize(dtype);
  const int n = world_;
  const OpDesc d{++op_seq_,
                 count,
                 0,
                 root,
                 static_cast<uint8_t>(all ? kAllReduce : kReduce),
                 static_cast<uint8_t>(dtype),
                 static_cast<uint8_t>(op),
                 0};
  std::vector<const void*> srcs(n);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);

  if (count * esz <= small_bytes_) {
    // Latency path: one copy in, one barrier, every writer reduces it all.
    if (count) std::memcpy(half(rank_, nextHalf()), src, count * esz);
    postDesc(d);
    stepBarrier();
    checkDescs(d);
    if (!writer) return;
    for (int k = 0; k < n; ++k) srcs[k] = half(k, curHalf());
    reduceInto(dtype, op, dst, nullptr, srcs.data(), n, count, factor, n);
    return;
  }

  // Bandwidth path: chunks of chunk_bytes_, each split into n slices aligned
  // to cache lines; rank r reduces slice r of every chunk. Step t copies in
  // chunk t+1, reduces slice rank of chunk t and gathers the slices of chunk
  // t-1, with one barrier per step.
  const size_t ce = chunk_bytes_ / esz;
  const size_t rounds = ceilDiv(count, ce);
  const size_t align = 64 / esz;
  auto sliceBegin = [&](size_t len, int k) {
    if (k >= n) return len;
    return std::min(len, (len * size_t(k) / size_t(n)) / align * align);
  };
  auto copyIn = [&](size_t t, int h) {
    const size_t off = t * ce, len = std::min(ce, count - off);
    const size_t b = sliceBegin(len, rank_), e = sliceBegin(len, rank_ + 1);
    char* area =
        half(rank_, h);  // the peers' slices only: ours is read in place
    std::memcpy(area, src + off * esz, b * esz);
    std::memcpy(area + e * esz, src + (off + e) * esz, (len - e) * esz);
  };
  auto reduceOwn = [&](size_t t, int h) {
    const size_t off = t * ce, len = std::min(ce, count - off);
    const size_t b = sliceBegin(len, rank_), e = sliceBegin(len, rank_ + 1);
    if (e == b) return;
    for (int k = 0; k < n; ++k)
      srcs[k] = k == rank_ ? src + (off + b) * esz
                           : static_cast<const char*>(half(k, h)) + b * esz;
    char* shared = half(rank_, h ^ 1) + chunk_bytes_ + b * esz;
    if (writer)
      reduceInto(dtype, op, dst + (off + b) * esz, shared, srcs.data(), n,
                 e - b, factor, n);
    else
      reduceInto(dtype, op, shared, nullptr, srcs.data(), n, e - b, factor, n);
  };
  auto gather = [&](size_t t, int h) {
    if (!writer) return;
    const size_t off = t * ce, len = std::min(ce, count - off);
    for (int k = 0; k < n; ++k) {
      if (k == rank_) continue;
      const size_t b = sliceBegin(len, k), e = sliceBegin(len, k + 1);
      std::memcpy(dst + (off + b) * esz, half(k, h) + chunk_bytes_ + b * esz,
                  (e - b) * esz);
    }
  };
  copyIn(0, nextHalf());
  postDesc(d);
  stepBarrier();
  checkDescs(d);
  for (size_t t = 0; t < rounds; ++t) {
    const int h = curHalf();
    if (t > 0) gather(t - 1, h);
    reduceOwn(t, h);
    if (t + 1 < rounds) copyIn(t + 1, h ^ 1);
    stepBarrier();
  }
  gather(rounds - 1, curHalf());
}

void Communicator::broadcast(void* buf, size_t count, DataType dtype,
                             int root) {
  beginOp("broadcast");
  if (root < 0 || root >= world_)
    invalid("broadcast: root " + std::to_string(root) + " is out of range");
  if (count && !buf) invalid("broadcast: null buffer");
  const size_t esz = dtypeSize(dtype);
  const OpDesc d{
      ++op_seq_, count, 0, root, kBroadcast, static_cast<uint8_t>(dtype), 0, 0};
  char* p = static_cast<char*>(buf);
  const size_t cb = half_bytes_ / esz;
  const size_t rounds = std::max<size_t>(1, ceilDiv(count, cb));
  auto copyIn = [&](size_t t, int h) {
    const size_t off = t * cb;
    if (rank_ == root && off < count)
      std::memcpy(half(root, h), p + off * esz,
                  std::min(cb, count - off) * esz);
  };
  copyIn(0, nextHalf());
  postDesc(d);
  stepBarrier();
  checkDescs(d);
  for (size_t t = 0; t < rounds; ++t) {
    const size_t off = t * cb;
    if (rank_ != root && off < count)
      std::memcpy(p + off * esz, half(root, curHalf()),
                  std::min(cb, count - off) * esz);
    if (t + 1 < rounds) {
      copyIn(t + 1, curHalf() ^ 1);
      stepBarrier();
    }
  }
}

void Communicator::allGather(const void* in, void* out, size_t count,
                             DataType dtype) {
  beginOp("allGather");
  gatherImpl(in, out, std::vector<size_t>(world_, count), dtype, -1,
             kAllGatherV);
}

void Communicator::allGatherV(const void* in, void* out,
                              const std::vector<size_t>& counts,
                              DataType dtype) {
  beginOp("allGatherV");
  gatherImpl(in, out, counts, dtype, -1, kAllGatherV);
}

void Communicator::gatherV(const void* in, void* out,
                           const std::vector<size_t>& counts, DataType dtype,
                           int root) {
  beginOp("gather");
  if (root < 0 || root >= world_)
    invalid("gather: root " + std::to_string(root) + " is out of range");
  gatherImpl(in, out, counts, dtype, root, kGatherV);
}

void Communicator::gatherImpl(const void* in, void* out,
                              const std::vector<size_t>& counts, DataType dtype,
                              int root, int kind) {
  const int n = world_;
  if (counts.size() != size_t(n))
    invalid(std::string(op_name_) + ": " + std::to_string(counts.size()) +
            " counts for " + std::to_string(n) + " ranks");
  const size_t esz = dtypeSize(dtype);
  const bool receiver = root < 0 || rank_ == root;
  std::vector<size_t> displ(n + 1, 0);
  for (int k = 0; k < n; ++k) displ[k + 1] = displ[k] + counts[k];
  const size_t mine = counts[rank_];
  if ((mine && !in) || (receiver && displ[n] && !out))
    invalid(std::string(op_name_) + ": null buffer");
  const OpDesc d{++op_seq_,
                 displ[n],
                 hashCounts(counts),
                 root,
                 static_cast<uint8_t>(kind),
                 static_cast<uint8_t>(dtype),
                 0,
                 0};
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  const size_t cb = half_bytes_ / esz;
  const size_t maxc = *std::max_element(counts.begin(), counts.end());
  const size_t rounds = std::max<size_t>(1, ceilDiv(maxc, cb));
  auto copyIn = [&](size_t t, int h) {
    const size_t off = t * cb;
    if (off < mine)
      std::memcpy(half(rank_, h), src + off * esz,
                  std::min(cb, mine - off) * esz);
  };
  copyIn(0, nextHalf());
  postDesc(d);
  stepBarrier();
  checkDescs(d);
  if (receiver && mine && dst + displ[rank_] * esz != src)
    std::memmove(dst + displ[rank_] * esz, src, mine * esz);
  for (size_t t = 0; t < rounds; ++t) {
    const size_t off = t * cb;
    for (int k = 0; receiver && k < n; ++k)
      if (k != rank_ && off < counts[k])
        std::memcpy(dst + (displ[k] + off) * esz, half(k, curHalf()),
                    std::min(cb, counts[k] - off) * esz);
    if (t + 1 < rounds) {
      copyIn(t + 1, curHalf() ^ 1);
      stepBarrier();
    }
  }
}

void Communicator::scatterV(const void* in, void* out,
                            const std::vector<size_t>& counts, DataType dtype,
                            int root) {
  beginOp("scatter");
  const int n = world_;
  if (root < 0 || root >= n)
    invalid("scatter: root " + std::to_string(root) + " is out of range");
  if (counts.size() != size_t(n))
    invalid("scatter: " + std::to_string(counts.size()) + " counts for " +
            std::to_string(n) + " ranks");
  const size_t esz = dtypeSize(dtype);
  std::vector<size_t> displ(n + 1, 0);
  for (int k = 0; k < n; ++k) displ[k + 1] = displ[k] + counts[k];
  if ((counts[rank_] && !out) || (rank_ == root && displ[n] && !in))
    invalid("scatter: null buffer");
  const OpDesc d{++op_seq_, displ[n],  hashCounts(counts),
                 root,      kScatterV, static_cast<uint8_t>(dtype),
                 0,         0};
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  // The root's half is split into one sub-area per destination.
  const size_t sub = (half_bytes_ / n) / 64 * 64;
  const size_t cb = sub / esz;
  size_t maxc = 0;
  for (int k = 0; k < n; ++k)
    if (k != root) maxc = std::max(maxc, counts[k]);
  const size_t rounds = std::max<size_t>(1, ceilDiv(maxc, cb));
  auto copyIn = [&](size_t t, int h) {
    if (rank_ != root) return;
    const size_t off = t * cb;
    for (int k = 0; k < n; ++k)
      if (k != root && off < counts[k])
        std::memcpy(half(root, h) + k * sub, src + (displ[k] + off) * esz,
                    std::min(cb, counts[k] - off) * esz);
  };
  copyIn(0, nextHalf());
  postDesc(d);
  stepBarrier();
  checkDescs(d);
  if (rank_ == root && counts[root] && dst != src + displ[root] * esz)
    std::memmove(dst, src + displ[root] * esz, counts[root] * esz);
  for (size_t t = 0; t < rounds; ++t) {
    const size_t off = t * cb;
    if (rank_ != root && off < counts[rank_])
      std::memcpy(dst + off * esz, half(root, curHalf()) + rank_ * sub,
                  std::min(cb, counts[rank_] - off) * esz);
    if (t + 1 < rounds) {
      copyIn(t + 1, curHalf() ^ 1);
      stepBarrier();
    }
  }
}

void Communicator::reduceScatter(const void* in, void* out, size_t count,
                                 DataType dtype, ReduceOp op, double factor) {
  reduceScatterV(in, out, std::vector<size_t>(world_, count), dtype, op,
                 factor);
}

void Communicator::reduceScatterV(const void* in, void* out,
                                  const std::vector<size_t>& counts,
                                  DataType dtype, ReduceOp op, double factor) {
  beginOp("reduceScatter");
  const int n = world_;
  if (counts.size() != size_t(n))
    invalid("reduceScatter: " + std::to_string(counts.size()) + " counts for " +
            std::to_string(n) + " ranks");
  const std::string why = checkReduce(dtype, op);
  if (!why.empty()) invalid("reduceScatter: " + why);
  const size_t esz = dtypeSize(dtype);
  std::vector<size_t> displ(n + 1, 0);
  for (int k = 0; k < n; ++k) displ[k + 1] = displ[k] + counts[k];
  if ((displ[n] && !in) || (counts[rank_] && !out))
    invalid("reduceScatter: null buffer");
  const OpDesc d{++op_seq_,
                 displ[n],
                 hashCounts(counts),
                 -1,
                 kReduceScatterV,
                 static_cast<uint8_t>(dtype),
                 static_cast<uint8_t>(op),
                 0};
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  // Each half has one sub-area per destination block.
  const size_t sub = (half_bytes_ / n) / 64 * 64;
  const size_t cb = sub / esz;
  const size_t maxc = *std::max_element(counts.begin(), counts.end());
  const size_t rounds = std::max<size_t>(1, ceilDiv(maxc, cb));
  std::vector<const void*> srcs(n);
  auto copyIn = [&](size_t t, int h) {
    const size_t off = t * cb;
    for (int k = 0; k < n; ++k)
      if (k != rank_ && off < counts[k])
        std::memcpy(half(rank_, h) + k * sub, src + (displ[k] + off) * esz,
                    std::min(cb, counts[k] - off) * esz);
  };
  copyIn(0, nextHalf());
  postDesc(d);
  stepBarrier();
  checkDescs(d);
  for (size_t t = 0; t < rounds; ++t) {
    const size_t off = t * cb;
    if (off < counts[rank_]) {
      for (int k = 0; k < n; ++k)
        srcs[k] = k == rank_ ? src + (displ[rank_] + off) * esz
                             : static_cast<const char*>(half(k, curHalf())) +
                                   rank_ * sub;
      reduceInto(dtype, op, dst + off * esz, nullptr, srcs.data(), n,
                 std::min(cb, counts[rank_] - off), factor, n);
    }
    if (t + 1 < rounds) {
      copyIn(t + 1, curHalf() ^ 1);
      stepBarrier();
    }
  }
}

void Communicator::allToAll(const void* in, void* out, size_t count,
                            DataType dtype) {
  const size_t b = count * dtypeSize(dtype);
  std::vector<size_t> bytes(world_, b), offs(world_);
  for (int k = 0; k < world_; ++k) offs[k] = size_t(k) * b;
  allToAllV(in, bytes, offs, out, bytes, offs);
}

void Communicator::allToAllV(const void* in,
                             const std::vector<size_t>& send_bytes,
                             const std::vector<size_t>& send_offsets, void* out,
                             const std::vector<size_t>& recv_bytes,
                             const std::vector<size_t>& recv_offsets) {
  beginOp("allToAll");
  const int n = world_;
  if (send_bytes.size() != size_t(n) || send_offsets.size() != size_t(n) ||
      recv_bytes.size() != size_t(n) || recv_offsets.size() != size_t(n))
    invalid("allToAll: size and offset lists must have one entry per rank (" +
            std::to_string(n) + ")");
  const OpDesc d{++op_seq_, 0, 0, -1, kAllToAllV, 0, 0, 0};
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  // Half layout: this rank's row of sizes (send then recv), then one
  // sub-area per destination.
  const size_t hdr = alignUp(2 * size_t(n) * sizeof(uint64_t), 64);
  const size_t sub = ((half_bytes_ - hdr) / n) / 64 * 64;
  auto copyIn = [&](size_t t, int h) {
    const size_t off = t * sub;
    for (int k = 0; k < n; ++k)
      if (k != rank_ && off < send_bytes[k])
        std::memcpy(half(rank_, h) + hdr + k * sub, src + send_offsets[k] + off,
                    std::min(sub, send_bytes[k] - off));
  };
  auto* row = reinterpret_cast<uint64_t*>(half(rank_, nextHalf()));
  for (int k = 0; k < n; ++k) {
    row[k] = send_bytes[k];
    row[n + k] = recv_bytes[k];
  }
  copyIn(0, nextHalf());
  postDesc(d);
  stepBarrier();
  checkDescs(d);
  // Every rank checks the whole size matrix, so all of them agree on
  // whether to fail and on the number of steps.
  size_t maxb = 0;
  std::vector<int> bad;
  std::string detail;
  for (int j = 0; j < n; ++j) {
    const auto* rj = reinterpret_cast<const uint64_t*>(half(j, curHalf()));
    for (int k = 0; k < n; ++k) {
      const auto* rk = reinterpret_cast<const uint64_t*>(half(k, curHalf()));
      if (rj[k] != rk[n + j]) {
        if (detail.size() < 400)
          detail += "; rank " + std::to_string(j) + " sends " +
                    std::to_string(rj[k]) + " bytes to rank " +
                    std::to_string(k) + ", which expects " +
                    std::to_string(rk[n + j]);
        if (std::find(bad.begin(), bad.end(), j) == bad.end()) bad.push_back(j);
      }
      if (j != k) maxb = std::max<size_t>(maxb, rj[k]);
    }
  }
  if (!bad.empty())
    fail(FailureKind::kMismatch,
         "allToAll (collective #" + std::to_string(d.seq) +
             " on communicator '" + name_ + "'): split sizes disagree" + detail,
         bad);
  if (send_bytes[rank_])
    std::memmove(dst + recv_offsets[rank_], src + send_offsets[rank_],
                 send_bytes[rank_]);
  const size_t rounds = std::max<size_t>(1, ceilDiv(maxb, sub));
  for (size_t t = 0; t < rounds; ++t) {
    const size_t off = t * sub;
    for (int j = 0; j < n; ++j)
      if (j != rank_ && off < recv_bytes[j])
        std::memcpy(dst + recv_offsets[j] + off,
                    half(j, curHalf()) + hdr + rank_ * sub,
                    std::min(sub, recv_bytes[j] - off));
    if (t + 1 < rounds) {
      copyIn(t + 1, curHalf() ^ 1);
      stepBarrier();
    }
  }
}

void Communicator::barrier() {
  beginOp("barrier");
  const OpDesc d{++op_seq_, 0, 0, -1, kBarrier, 0, 0, 0};
  postDesc(d);
  stepBarrier();
  checkDescs(d);
}

// -------------------------------------------------------- point to point

Communicator::Mailbox& Communicator::mailbox(int src, int dst) const {
  return boxes_[size_t(src) * size_t(world_ - 1) +
                size_t(dst < src ? dst : dst - 1)];
}

char* Communicator::ring(int src, int dst) const {
  return rings_ + (size_t(src) * size_t(world_ - 1) +
                   size_t(dst < src ? dst : dst - 1)) *
                      p2p_bytes_;
}

size_t Communicator::tryPush(int dst, const char* p, size_t n) {
  Mailbox& mb = mailbox(rank_, dst);
  char* r = ring(rank_, dst);
  const size_t cap = p2p_bytes_;
  uint64_t head = mb.head.load(std::memory_order_relaxed);  // we own head
  size_t done = 0;
  while (n) {
    const size_t space = cap - (head - mb.tail.load(std::memory_order_acquire));
    // Publish at most a quarter of the ring at a time, so the receiver
    // drains while we fill; and wait for a useful amount of space.
    const size_t want = std::min(n, cap / 4);
    if (space < want) break;
    const size_t pos = head % cap;
    const size_t k = std::min({want, cap - pos});
    std::memcpy(r + pos, p, k);
    head += k;
    p += k;
    n -= k;
    done += k;
    mb.head.store(head, std::memory_order_release);
    mb.data.notify();
    ctrl_[dst].doorbell.notify();
  }
  return done;
}

size_t Communicator::tryPop(int src, char* p, size_t n) {
  Mailbox& mb = mailbox(src, rank_);
  const char* r = ring(src, rank_);
  const size_t cap = p2p_bytes_;
  uint64_t tail = mb.tail.load(std::memory_order_relaxed);  // we own tail
  size_t done = 0;
  while (n) {
    const size_t avail = mb.head.load(std::memory_order_acquire) - tail;
    if (avail == 0) break;
    const size_t pos = tail % cap;
    const size_t k = std::min({n, avail, cap - pos});
    if (p) {
      std::memcpy(p, r + pos, k);
      p += k;
    }
    tail += k;
    n -= k;
    done += k;
    mb.tail.store(tail, std::memory_order_release);
    mb.space.notify();
    ctrl_[src].doorbell.notify();
  }
  return done;
}

bool Communicator::canPush(int dst, size_t n) const {
  const Mailbox& mb = mailbox(rank_, dst);
  const size_t cap = p2p_bytes_;
  return cap - (mb.head.load(std::memory_order_relaxed) -
                mb.tail.load(std::memory_order_acquire)) >=
         std::min(n, cap / 4);
}

bool Communicator::canPop(int src) const {
  const Mailbox& mb = mailbox(src, rank_);
  return mb.head.load(std::memory_order_acquire) !=
         mb.tail.load(std::memory_order_relaxed);
}

void Communicator::push(int dst, const char* p, size_t n) {
  while (n) {
    const size_t k = tryPush(dst, p, n);
    p += k;
    n -= k;
    if (n && !k)
      waitUntil(
          mailbox(rank_, dst).space, [&] { return canPush(dst, n); },
          [&] { return std::vector<int>{dst}; }, "receive");
  }
}

void Communicator::pop(int src, char* p, size_t n) {
  while (n) {
    const size_t k = tryPop(src, p, n);
    if (p) p += k;
    n -= k;
    if (n && !k)
      waitUntil(
          mailbox(src, rank_).data, [&] { return canPop(src); },
          [&] { return std::vector<int>{src}; }, "send");
  }
}

void Communicator::send(const void* buf, size_t bytes, int dst, int tag) {
  beginOp("send");
  if (dst < 0 || dst >= world_ || dst == rank_)
    invalid("send: destination rank " + std::to_string(dst) +
            " is not a peer of rank " + std::to_string(rank_));
  if (bytes && !buf) invalid("send: null buffer");
  const MsgHeader h{kMsgMagic, tag, bytes};
  push(dst, reinterpret_cast<const char*>(&h), sizeof h);
  push(dst, static_cast<const char*>(buf), bytes);
}

void Communicator::recv(void* buf, size_t bytes, int src, int tag) {
  beginOp("recv");
  if (src < 0 || src >= world_ || src == rank_)
    invalid("recv: source rank " + std::to_string(src) +
            " is not a peer of rank " + std::to_string(rank_));
  if (bytes && !buf) invalid("recv: null buffer");
  MsgHeader h{};
  pop(src, reinterpret_cast<char*>(&h), sizeof h);
  if (h.magic != kMsgMagic)
    fail(FailureKind::kAborted,
         "recv from rank " + std::to_string(src) + ": corrupt mailbox", {src});
  if (h.tag != tag || h.bytes != bytes) {
    pop(src, nullptr, h.bytes);  // drop it: the pair stays in step
    fail(FailureKind::kMismatch,
         "recv on rank " + std::to_string(rank_) + " expected " +
             std::to_string(bytes) + " bytes with tag " + std::to_string(tag) +
             " from rank " + std::to_string(src) +
             ", but its next message has " + std::to_string(h.bytes) +
             " bytes with tag " + std::to_string(h.tag) +
             " (the message was dropped)",
         {src});
  }
  pop(src, static_cast<char*>(buf), bytes);
}

void Communicator::exchange(const std::vector<P2POp>& ops) {
  beginOp("sendRecv");
  struct State {
    MsgHeader hdr;
    size_t moved = 0;  // header + payload bytes moved so far
    bool done = false;
  };
  std::vector<State> st(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    if (op.peer < 0 || op.peer >= world_ || op.peer == rank_)
      invalid("sendRecv: rank " + std::to_string(op.peer) +
              " is not a peer of rank " + std::to_string(rank_));
    if (op.bytes && !op.buf) invalid("sendRecv: null buffer");
    st[i].hdr = MsgHeader{kMsgMagic, op.tag, op.bytes};
  }
  // Only the first unfinished op of each (direction, peer) may move: that
  // keeps messages between two ranks in order.
  auto active = [&](size_t i) {
    if (st[i].done) return false;
    for (size_t j = 0; j < i; ++j)
      if (!st[j].done && ops[j].is_send == ops[i].is_send &&
          ops[j].peer == ops[i].peer)
        return false;
    return true;
  };
  std::string mismatch;
  std::vector<int> mismatch_ranks;
  constexpr size_t kHdr = sizeof(MsgHeader);
  for (;;) {
    bool all_done = true, moved = false;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!active(i)) {
        all_done = all_done && st[i].done;
        continue;
      }
      const P2POp& op = ops[i];
      State& s = st[i];
      size_t k = 0;
      if (op.is_send) {
        if (s.moved < kHdr)
          k = tryPush(op.peer, reinterpret_cast<const char*>(&s.hdr) + s.moved,
                      kHdr - s.moved);
        else
          k = tryPush(op.peer,
                      static_cast<const char*>(op.buf) + (s.moved - kHdr),
                      op.bytes - (s.moved - kHdr));
        s.moved += k;
        s.done = s.moved == kHdr + op.bytes;
      } else {
        if (s.moved < kHdr) {
          k = tryPop(op.peer, reinterpret_cast<char*>(&s.hdr) + s.moved,
                     kHdr - s.moved);
          s.moved += k;
          if (s.moved == kHdr) {
            if (s.hdr.magic != kMsgMagic)
              fail(FailureKind::kAborted,
                   "sendRecv from rank " + std::to_string(op.peer) +
                       ": corrupt mailbox",
                   {op.peer});
            if (s.hdr.tag != op.tag || s.hdr.bytes != op.bytes) {
              if (mismatch.empty())
                mismatch =
                    "recv on rank " + std::to_string(rank_) + " expected " +
                    std::to_string(op.bytes) + " bytes with tag " +
                    std::to_string(op.tag) + " from rank " +
                    std::to_string(op.peer) + ", but its next message has " +
                    std::to_string(s.hdr.bytes) + " bytes with tag " +
                    std::to_string(s.hdr.tag) + " (the message was dropped)";
              mismatch_ranks.push_back(op.peer);
            }
          }
        } else {
          // A mismatched message is drained and dropped.
          const bool drop = s.hdr.tag != op.tag || s.hdr.bytes != op.bytes;
          k = tryPop(
              op.peer,
              drop ? nullptr : static_cast<char*>(op.buf) + (s.moved - kHdr),
              s.hdr.bytes - (s.moved - kHdr));
          s.moved += k;
        }
        s.done = s.moved >= kHdr && s.moved == kHdr + s.hdr.bytes;
      }
      moved = moved || k > 0;
      all_done = all_done && s.done;
    }
    if (all_done) break;
    if (moved) continue;
    waitUntil(
        ctrl_[rank_].doorbell,
        [&] {
          for (size_t i = 0; i < ops.size(); ++i) {
            if (!active(i)) continue;
            const P2POp& op = ops[i];
            if (op.is_send ? canPush(op.peer, kHdr + op.bytes - st[i].moved)
                           : canPop(op.peer))
              return true;
          }
          return false;
        },
        [&] {
          std::vector<int> m;
          for (size_t i = 0; i < ops.size(); ++i)
            if (active(i) &&
                std::find(m.begin(), m.end(), ops[i].peer) == m.end())
              m.push_back(ops[i].peer);
          return m;
        },
        "send or receive");
  }
  if (!mismatch.empty()) fail(FailureKind::kMismatch, mismatch, mismatch_ranks);
}

}  // namespace collectives
}  // namespace neuron_rt
