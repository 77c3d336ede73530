// communicator_*.cpp: one class, a file per concern (they sort together).
// This one: set-up (segment layout, rendezvous, construction, destruction).
#include <unistd.h>

#include <thread>

#include "communicator_impl.h"

namespace neuron_rt {
namespace collectives {

namespace {

int cpusAvailable() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::thread::hardware_concurrency());
}

// The segment's parts start on page boundaries, and its sizes are whole
// pages (what mmap deals in; no part shares a page with another's header).
constexpr size_t kPageBytes = 4096;
// Default all-reduce chunk when every rank has a CPU of its own: small
// enough that a chunk's staging buffers stay in the last-level cache.
constexpr size_t kChunkBytesOwnCpus = size_t{1} << 20;
// Default chunk when ranks outnumber the CPUs: every chunk ends in a barrier
// that waits for descheduled ranks, so fewer, larger chunks win (see
// CommOptions::chunk_bytes for the measured figures).
constexpr size_t kChunkBytesSharedCpus = size_t{4} << 20;
// The smallest chunk: each chunk costs a barrier, which a chunk of at least
// this size keeps small next to its copies (an explicit chunk_bytes too).
constexpr size_t kMinChunkBytes = size_t{64} << 10;
// Each rank reduces 1/N of a chunk, in slices aligned to 64-byte cache lines:
// at least this many bytes per rank keep every slice four lines or more.
constexpr size_t kMinChunkBytesPerRank = 256;
// Send/recv ring per ordered pair of ranks: 256 KiB by default, shrunk (to
// no less than 16 KiB) when the world is large, so that all rings together
// stay near 64 MiB of shared memory (world 32: 992 rings of 68 KiB).
constexpr size_t kP2pBytesDefault = size_t{256} << 10;
constexpr size_t kP2pBytesMin = size_t{16} << 10;
constexpr size_t kP2pBytesAllPairs = size_t{64} << 20;

// Sizes and offsets of the segment's parts, as rank 0 chooses them.
struct SegmentPlan {
  size_t chunk_bytes, staging_buffer_bytes, p2p_bytes;
  size_t ctrl_off, box_off, staging_off, ring_off, total;
};

SegmentPlan planSegment(int n, const CommOptions& options) {
  SegmentPlan plan{};
  const size_t wanted = options.chunk_bytes != 0 ? options.chunk_bytes
                        : n <= cpusAvailable()   ? kChunkBytesOwnCpus
                                                 : kChunkBytesSharedCpus;
  plan.chunk_bytes = alignUp(
      std::max({wanted, kMinChunkBytes, size_t(n) * kMinChunkBytesPerRank}),
      kPageBytes);
  // A staging buffer holds an all-reduce chunk and its reduced slices;
  // all-to-all also needs room for the size matrix row and N sub-areas.
  plan.staging_buffer_bytes = 2 * plan.chunk_bytes;
  size_t p2p = options.p2p_bytes;
  const size_t pairs = size_t(n) * size_t(n - 1);
  if (p2p == 0) {
    p2p = kP2pBytesDefault;
    if (pairs && pairs * p2p > kP2pBytesAllPairs)
      p2p = std::max(kP2pBytesMin, kP2pBytesAllPairs / pairs);
  }
  plan.p2p_bytes = alignUp(std::max(p2p, kPageBytes), kPageBytes);
  size_t off = alignUp(sizeof(Communicator::Header), kPageBytes);
  plan.ctrl_off = off;
  off = alignUp(off + n * sizeof(Communicator::RankCtrl), kPageBytes);
  plan.box_off = off;
  off = alignUp(off + pairs * sizeof(Communicator::Mailbox), kPageBytes);
  plan.staging_off = off;
  off += size_t(n) * 2 * plan.staging_buffer_bytes;
  plan.ring_off = off;
  off += pairs * plan.p2p_bytes;
  plan.total = alignUp(off, kPageBytes);
  return plan;
}

}  // namespace

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
  c->setTimeout(options.timeout);
  c->join(options);
  return c;
}

void Communicator::join(const CommOptions& options) {
  op_name_ = "create";
  deadline_ = Clock::now() + timeout();
  const std::string shm = ShmSegment::shmName(name_);
  if (rank_ == 0)
    createSegment(shm, options);
  else
    openSegment(shm);
  mapSegment(options);
  claimRank();
  awaitAllJoined();
  // Everyone has mapped the segment: remove its name now, so that nothing is
  // left in /dev/shm however the processes end.
  seg_.unlink();
}

void Communicator::createSegment(const std::string& shm,
                                 const CommOptions& options) {
  if (options.cleanup_stale) ShmSegment::cleanupStale();
  const SegmentPlan plan = planSegment(world_, options);
  seg_ = ShmSegment::create(shm, plan.total);
  auto* h = static_cast<Header*>(seg_.data());
  h->world_size = world_;
  h->chunk_bytes = plan.chunk_bytes;
  h->staging_buffer_bytes = plan.staging_buffer_bytes;
  h->p2p_bytes = plan.p2p_bytes;
  h->ctrl_off = plan.ctrl_off;
  h->box_off = plan.box_off;
  h->staging_off = plan.staging_off;
  h->ring_off = plan.ring_off;
  seg_.publish();
}

void Communicator::openSegment(const std::string& shm) {
  // Rank 0 creates and publishes the segment; until then there is nothing
  // to sleep on, so poll.
  for (;;) {
    if (!seg_.data()) ShmSegment::tryOpen(shm, &seg_);
    if (seg_.published()) {
      const int creator = seg_.prologue()->creator_pid;
      if (processAlive(creator)) return;
      seg_.unlink();  // left over by a dead job of the same name
      seg_ = ShmSegment();
    }
    if (Clock::now() >= deadline_)
      throw CollectiveError(
          FailureKind::kTimeout,
          "neuron collectives: rank " + std::to_string(rank_) +
              " timed out after " + std::to_string(timeout().count()) +
              " ms waiting for rank 0 to create communicator '" + name_ +
              "' (shared memory " + shm + ")",
          {0});
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void Communicator::mapSegment(const CommOptions& options) {
  hdr_ = static_cast<Header*>(seg_.data());
  if (hdr_->world_size != world_) {
    const int theirs = hdr_->world_size;
    hdr_ = nullptr;
    throw CollectiveError(FailureKind::kSetup,
                          "neuron collectives: rank " + std::to_string(rank_) +
                              " joined communicator '" + name_ +
                              "' with world size " + std::to_string(world_) +
                              ", but rank 0 created it for " +
                              std::to_string(theirs) + " ranks",
                          {0});
  }
  char* base = static_cast<char*>(seg_.data());
  ctrl_ = reinterpret_cast<RankCtrl*>(base + hdr_->ctrl_off);
  boxes_ = reinterpret_cast<Mailbox*>(base + hdr_->box_off);
  staging_ = base + hdr_->staging_off;
  rings_ = base + hdr_->ring_off;
  // Sizes come from rank 0's header, so that every rank agrees on them.
  chunk_bytes_ = hdr_->chunk_bytes;
  staging_buffer_bytes_ = hdr_->staging_buffer_bytes;
  p2p_bytes_ = hdr_->p2p_bytes;
  small_bytes_ = std::min(options.small_bytes, chunk_bytes_);
  const int cpus = cpusAvailable();
  spin_ = std::chrono::microseconds(
      options.spin_us >= 0 ? options.spin_us : (world_ <= cpus ? 50 : 0));
}

void Communicator::claimRank() {
  int32_t expected = 0;
  if (!ctrl_[rank_].pid.compare_exchange_strong(
          expected, static_cast<int32_t>(getpid()))) {
    const int other = expected;
    // Detach, so that the destructor does not mark the other process's
    // rank as gone.
    ctrl_ = nullptr;
    hdr_ = nullptr;
    throw CollectiveError(FailureKind::kSetup,
                          "neuron collectives: rank " + std::to_string(rank_) +
                              " of communicator '" + name_ +
                              "' was already taken by process " +
                              std::to_string(other));
  }
}

void Communicator::awaitAllJoined() {
  const int n = world_;
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
}

Communicator::~Communicator() {
  // Peers still waiting for this rank fail at once instead of timing out.
  if (ctrl_) ctrl_[rank_].left.store(1, std::memory_order_release);
}

}  // namespace collectives
}  // namespace neuron_rt
