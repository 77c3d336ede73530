// A communicator between the processes of one host, over one shared-memory
// segment.
//
// Every rank calls the same collectives in the same order (as with NCCL);
// each call blocks the calling thread until this rank's part is done, which
// is what a stream work item wants. All data moves through the segment:
//  - two staging buffers per rank (double buffering). In each step a rank
//    writes only its own next buffer, then all ranks meet at a barrier, which
//    makes that buffer current, then they read each other's current buffers.
//    Alternating buffers means a rank may write the next one while slower
//    peers still read the previous one, so every step needs exactly one
//    barrier (see communicator_collectives.cpp for the proof sketch).
//  - one ring-buffer mailbox per ordered pair of ranks for send/recv, so that
//    send(0->1) and send(1->0) are independent and messages from one sender to
//    one receiver arrive in order.
// Large all-reduces are a pipelined reduce-scatter + all-gather through the
// staging buffers in chunks of `chunk_bytes` (each rank reduces its 1/N of
// every chunk straight from the peers' buffers); small ones take one copy in,
// one barrier, and each rank reduces everything. Results are bit-identical on
// every rank because each element is reduced in rank order by the same code.
//
// Failures are CollectiveError exceptions (a neuron_rt::Error): bad arguments
// and mismatches between ranks (kind, count, dtype, op, root, per-rank
// counts: compared at each collective's first barrier) leave the
// communicator usable. A timeout, a dead peer or abort() is fatal: the rank
// that sees it first sets the segment's abort flag so that every other rank
// fails fast, and later calls on this communicator throw at once.
//
// Waiting: a short spin (that also yields, in case a peer shares our CPU),
// then FUTEX_WAIT on a word in the segment in 10 ms slices; between slices
// the waiter checks the abort flag, its deadline, and whether the ranks it
// waits for are still alive (kill(pid, 0) and /proc, so zombies count as
// dead) or have destroyed their communicator.
//
// Threads: one thread at a time may run collectives and send/recv on a
// communicator; abort() may be called from any thread at any time.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "neuron_runtime/collectives/futex_signal.h"
#include "neuron_runtime/collectives/shm_segment.h"
#include "neuron_runtime/collectives/types.h"

namespace neuron_rt {
namespace collectives {

struct CommOptions {
  // Bound on each call (and on the rendezvous in create()): peers that have
  // not arrived by then are reported by rank.
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  // Bytes of each all-reduce chunk. The segment holds 4 * chunk_bytes per
  // rank. Taken from rank 0. 0: 1 MiB, sized to stay in the last-level
  // cache, when every rank has a CPU; 4 MiB when ranks outnumber the CPUs,
  // where each chunk's barrier waits for descheduled ranks and fewer,
  // larger chunks win (64 MiB all-reduce, 4 ranks on 2 CPUs: 1.0 -> 1.5
  // GB/s bus bandwidth; 2 ranks lose with 4 MiB: 4.4 -> 2.5 GB/s).
  size_t chunk_bytes = 0;
  // All-reduces/reduces of at most this many bytes take the latency path.
  size_t small_bytes = size_t{32} << 10;
  // Ring-buffer bytes per ordered pair for send/recv; 0: 256 KiB, shrunk for
  // large worlds to keep the total near 64 MiB. Taken from rank 0.
  size_t p2p_bytes = 0;
  // Busy-wait before sleeping on a futex, in microseconds; -1: 50 us when
  // there are at least as many CPUs as ranks, else none (one sched_yield:
  // waits must leave the CPU to the rank that has work).
  int spin_us = -1;
  // Rank 0 removes stale segments of dead jobs before creating its own.
  bool cleanup_stale = true;
};

class Communicator {
 public:
  // Joins communicator `name` (a unique id per job and group, [A-Za-z0-9._-],
  // at most 200 characters) as `rank` of `world_size`. Rank 0 creates the
  // segment, the others wait for it; returns when all ranks have joined and
  // the segment's name has been removed. Throws CollectiveError.
  static std::unique_ptr<Communicator> create(const std::string& name, int rank,
                                              int world_size,
                                              const CommOptions& options = {});
  // Marks this rank as gone, so that peers still waiting for it fail at once
  // (kPeerDied) instead of timing out. The segment is already unlinked; the
  // mapping goes with the last process.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int worldSize() const { return world_; }
  const std::string& name() const { return name_; }

  // Counts are in elements of `dtype` unless a name says bytes. `in` may
  // equal `out` (in place) wherever both appear; partial overlap is not
  // allowed. `factor` is PREMUL_SUM's scalar.
  void allReduce(const void* in, void* out, size_t count, DataType dtype,
                 ReduceOp op, double factor = 1.0);
  // `out` is written on `root` only.
  void reduce(const void* in, void* out, size_t count, DataType dtype,
              ReduceOp op, int root, double factor = 1.0);
  void broadcast(void* buf, size_t count, DataType dtype, int root);
  // out = concatenation of every rank's `count` elements, in rank order.
  void allGather(const void* in, void* out, size_t count, DataType dtype);
  // Rank k contributes counts[k] elements; out holds them packed in rank
  // order. `counts` must be the same on every rank.
  void allGatherV(const void* in, void* out, const std::vector<size_t>& counts,
                  DataType dtype);
  // As allGatherV, but only `root` receives (out is ignored elsewhere).
  void gatherV(const void* in, void* out, const std::vector<size_t>& counts,
               DataType dtype, int root);
  // `root` sends counts[k] elements (packed in rank order in `in`) to rank k,
  // which writes them to `out`. `in` is read on `root` only.
  void scatterV(const void* in, void* out, const std::vector<size_t>& counts,
                DataType dtype, int root);
  // in: world_size blocks of `count` elements; out: the reduction of block
  // `rank` over all ranks.
  void reduceScatter(const void* in, void* out, size_t count, DataType dtype,
                     ReduceOp op, double factor = 1.0);
  // in: blocks of counts[0], counts[1], ... elements; out: counts[rank].
  void reduceScatterV(const void* in, void* out,
                      const std::vector<size_t>& counts, DataType dtype,
                      ReduceOp op, double factor = 1.0);
  // Sends send_bytes[k] bytes at in + send_offsets[k] to rank k, receives
  // recv_bytes[k] bytes from rank k at out + recv_offsets[k]. Sizes must
  // match pairwise across ranks (checked on every rank before any data is
  // read). Splits may be uneven and zero.
  void allToAllV(const void* in, const std::vector<size_t>& send_bytes,
                 const std::vector<size_t>& send_offsets, void* out,
                 const std::vector<size_t>& recv_bytes,
                 const std::vector<size_t>& recv_offsets);
  // Even split: `count` elements to and from every rank.
  void allToAll(const void* in, void* out, size_t count, DataType dtype);
  // Point to point, in order per (sender, receiver). send() returns once the
  // message is in the mailbox (blocking while it is full, so a message larger
  // than the mailbox needs the receiver to be receiving); recv() checks that
  // the next message from `src` has this size and tag.
  void send(const void* buf, size_t bytes, int dst, int tag = 0);
  void recv(void* buf, size_t bytes, int src, int tag = 0);
  // Runs several sends and receives at once, progressing all of them, so
  // that large messages in both directions (or around a ring) cannot
  // deadlock: what c10d's batch_isend_irecv needs. Ops to the same peer in
  // the same direction still go in order. A size/tag mismatch drops that
  // message, completes the rest, then throws kMismatch.
  struct P2POp {
    bool is_send;
    int peer;
    void* buf;  // read for sends
    size_t bytes;
    int tag = 0;
  };
  void exchange(const std::vector<P2POp>& ops);
  void barrier();

  // Makes every rank's current and future calls fail fast (kAborted; a rank
  // that fails fatally does the same, and the others then report its cause:
  // kPeerDied or kTimeout with the same ranks).
  // Safe from any thread, including while a call on this one is blocked.
  void abort(const std::string& reason = "abort() called");

  // The bound on each later call (torch.distributed's set_timeout). Safe from
  // any thread: a call already waiting keeps the deadline it started with.
  void setTimeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds timeout() const;
  bool aborted() const;

  // See ShmSegment::cleanupStale().
  static int cleanupStale() { return ShmSegment::cleanupStale(); }

  // The layout of the segment (defined in src/collectives/communicator_impl.h).
  struct Header;
  struct RankCtrl;
  struct Mailbox;
  struct OpDesc;

 private:
  // Progress of one send or receive of exchange() (communicator_p2p.cpp).
  struct Transfer;

  Communicator() = default;

  // --- set-up (communicator_setup.cpp), the steps of join() ---
  void join(const CommOptions& options);
  void createSegment(const std::string& shm, const CommOptions& options);
  void openSegment(const std::string& shm);
  void mapSegment(const CommOptions& options);
  void claimRank();
  void awaitAllJoined();
  // --- per-call bookkeeping, failures and waits (communicator_waits.cpp) ---
  void beginOp(const char* what);
  [[noreturn]] void fail(FailureKind kind, const std::string& message,
                         std::vector<int> ranks);
  [[noreturn]] void throwAborted();
  void abortWith(FailureKind kind, const std::string& reason,
                 const std::vector<int>& ranks);
  // Waits until done(); `missing` lists the ranks being waited for (checked
  // for liveness, named on timeout); `verb` is what they have not done yet
  // ("arrive", "send", ...), for the messages.
  // (Defined in communicator_impl.h.)
  template <class Done, class Missing>
  void waitUntil(FutexSignal& sig, Done done, Missing missing,
                 const char* verb);
  // The ranks of `ranks` that exited or destroyed their communicator.
  std::vector<int> goneAmong(const std::vector<int>& ranks) const;
  [[noreturn]] void failPeersGone(const std::vector<int>& gone,
                                  const char* verb);
  [[noreturn]] void failTimeout(const std::vector<int>& missing,
                                const char* verb);
  // --- steps of the collectives (communicator_collectives.cpp) ---
  // Which of a rank's two staging buffers this step reads (current) and
  // which it fills for the next step (next); they swap at every barrier.
  int nextBuffer() const { return static_cast<int>((epoch_ + 1) & 1); }
  int currentBuffer() const { return static_cast<int>(epoch_ & 1); }
  char* stagingBuffer(int rank, int buffer) const;
  void postDesc(const OpDesc& d);
  void stepBarrier();
  void checkDescs(const OpDesc& d);
  // The double-buffered pipeline that every collective runs: stage(t, b)
  // writes this rank's part of chunk t into its staging buffer b,
  // consume(t, b) reads chunk t from the ranks' buffers b.
  template <class Stage>
  void firstStep(const OpDesc& d, Stage stage);
  template <class Stage, class Consume>
  void pipelinedSteps(size_t steps, Stage stage, Consume consume);
  void reduceImpl(const void* in, void* out, size_t count, DataType dtype,
                  ReduceOp op, int root, double factor, bool all);
  void reduceSmall(const OpDesc& d, const char* src, char* dst, bool writer,
                   double factor);
  void reduceChunked(const OpDesc& d, const char* src, char* dst, bool writer,
                     double factor);
  void gatherImpl(const void* in, void* out, const std::vector<size_t>& counts,
                  DataType dtype, int root, int kind);
  size_t checkSplitSizes(uint64_t seq);
  // --- point to point (communicator_p2p.cpp) ---
  Mailbox& mailbox(int src, int dst) const;
  char* ring(int src, int dst) const;
  // Move what fits now (never block); return the bytes moved.
  size_t tryPush(int dst, const char* p, size_t n);
  size_t tryPop(int src, char* p, size_t n);
  bool canPush(int dst, size_t n) const;
  bool canPop(int src) const;
  // Block until all n bytes have moved.
  void push(int dst, const char* p, size_t n);
  void pop(int src, char* p, size_t n);
  // One non-blocking move of an exchange() op; return the bytes moved.
  size_t advanceSend(const P2POp& op, Transfer& t);
  size_t advanceRecv(const P2POp& op, Transfer& t, std::string& mismatch,
                     std::vector<int>& mismatch_ranks);
  void awaitExchangeProgress(const std::vector<P2POp>& ops,
                             const std::vector<Transfer>& transfers);

  std::string name_;
  int rank_ = 0;
  int world_ = 1;
  ShmSegment seg_;
  Header* hdr_ = nullptr;
  RankCtrl* ctrl_ = nullptr;  // world_ entries
  Mailbox* boxes_ = nullptr;  // world_ * (world_ - 1) entries
  char* staging_ = nullptr;   // world_ * 2 staging buffers
  char* rings_ = nullptr;     // world_ * (world_ - 1) rings
  size_t chunk_bytes_ = 0;
  size_t staging_buffer_bytes_ = 0;  // 2 * chunk_bytes_
  size_t p2p_bytes_ = 0;
  size_t small_bytes_ = 0;
  // Nanoseconds; atomic: set from the host, read by the stream's worker.
  std::atomic<int64_t> timeout_ns_{0};
  std::chrono::nanoseconds spin_{};
  // State of the current call (one thread at a time).
  uint64_t epoch_ = 0;   // barriers passed
  uint64_t op_seq_ = 0;  // collectives started
  const char* op_name_ = "";
  std::chrono::steady_clock::time_point deadline_{};
  std::string broken_;  // set by a fatal error: later calls rethrow it
  FailureKind broken_kind_ = FailureKind::kAborted;
  std::vector<int> pids_;  // cached peer pids (for liveness checks)
};

}  // namespace collectives
}  // namespace neuron_rt
