// communicator_*.cpp: one class, a file per concern (they sort together).
// This one: the staged steps and the collectives built on them.
#include <cstring>

#include "communicator_impl.h"
#include "neuron_runtime/collectives/reduce.h"
#include "neuron_runtime/fnv1a.h"

// Why one barrier per step is enough (the staging invariant).
// Step p is "write your own buffer p%2, barrier p, read anyone's buffer p%2".
// A rank starts writing buffer p%2 again in step p+2, i.e. after it has passed
// barrier p+1. Every rank arrives at barrier p+1 only after finishing its
// reads of step p, so nobody still reads what is overwritten. The reduced
// slices of an all-reduce are written after barrier p into the *next* buffer
// (p+1)%2, which is the same rule one step early: the readers of that buffer
// (step p-1) all arrived at barrier p before we passed it.

namespace neuron_rt {
namespace collectives {

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

size_t ceilDiv(size_t a, size_t b) { return (a + b - 1) / b; }

uint64_t hashCounts(const std::vector<size_t>& v) { return fnv1aWords(v); }

// displ[k]: where rank k's block starts in a packed buffer; displ[n]: total.
std::vector<size_t> displacements(const std::vector<size_t>& counts) {
  std::vector<size_t> displ(counts.size() + 1, 0);
  for (size_t k = 0; k < counts.size(); ++k)
    displ[k + 1] = displ[k] + counts[k];
  return displ;
}

// Stages chunk t of every peer's block into that peer's sub-area of `area`
// (sub-areas of `sub` bytes; block k: counts[k] elements of `esz` bytes at
// element displ[k] of `src`). Scatter, reduce-scatter and all-to-all stage so.
void stageBlocksForPeers(char* area, size_t sub, size_t t, int self,
                         const char* src, const std::vector<size_t>& counts,
                         const std::vector<size_t>& displ, size_t esz) {
  const size_t cb = sub / esz, off = t * cb;
  for (size_t k = 0; k < counts.size(); ++k)
    if (int(k) != self && off < counts[k])
      std::memcpy(area + k * sub, src + (displ[k] + off) * esz,
                  std::min(cb, counts[k] - off) * esz);
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

// ------------------------------------------------------------ the steps

char* Communicator::stagingBuffer(int rank, int buffer) const {
  return staging_ + (size_t(rank) * 2 + size_t(buffer)) * staging_buffer_bytes_;
}

void Communicator::postDesc(const OpDesc& d) {
  ctrl_[rank_].desc[nextBuffer()] = d;
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
  const int b = currentBuffer();
  const OpDesc& ref = ctrl_[0].desc[b];
  std::vector<int> bad;
  std::string detail;
  for (int r = 1; r < world_; ++r) {
    const OpDesc& o = ctrl_[r].desc[b];
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

// Stages chunk 0 into the buffer that the first barrier makes current, and
// posts the call's descriptor with it, so that after the barrier every rank
// can both check that all ranks called the same collective and read chunk 0.
template <class Stage>
void Communicator::firstStep(const OpDesc& d, Stage stage) {
  stage(size_t{0}, nextBuffer());
  postDesc(d);
  stepBarrier();
  checkDescs(d);
}

// The double-buffered chunk loop of every collective, after firstStep(): in
// step t each rank consumes chunk t from the current buffers and stages chunk
// t+1 into its other buffer (which no peer reads in this step, see the
// staging invariant above), then all meet at one barrier that swaps the
// buffers. The last step stages nothing and ends without a barrier: the
// invariant carries over, as the next call writes its other buffer first and
// this one only after its first barrier, which waits for these reads. Every
// rank must run the same number of steps, or the barriers no longer pair up.
template <class Stage, class Consume>
void Communicator::pipelinedSteps(size_t steps, Stage stage, Consume consume) {
  for (size_t t = 0; t < steps; ++t) {
    consume(t, currentBuffer());
    if (t + 1 == steps) break;
    stage(t + 1, currentBuffer() ^ 1);
    stepBarrier();
  }
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
  const OpDesc d{++op_seq_,
                 count,
                 0,
                 root,
                 static_cast<uint8_t>(all ? kAllReduce : kReduce),
                 static_cast<uint8_t>(dtype),
                 static_cast<uint8_t>(op),
                 0};
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  // Every rank takes the same path: the size is part of the descriptor.
  if (count * dtypeSize(dtype) <= small_bytes_)
    reduceSmall(d, src, dst, writer, factor);
  else
    reduceChunked(d, src, dst, writer, factor);
}

// Latency path: one copy in, one barrier, every writer reduces it all.
void Communicator::reduceSmall(const OpDesc& d, const char* src, char* dst,
                               bool writer, double factor) {
  const auto dtype = static_cast<DataType>(d.dtype);
  const size_t count = d.count;
  const int n = world_;
  firstStep(d, [&](size_t, int b) {
    if (count)
      std::memcpy(stagingBuffer(rank_, b), src, count * dtypeSize(dtype));
  });
  if (!writer) return;
  std::vector<const void*> srcs(n);
  for (int k = 0; k < n; ++k) srcs[k] = stagingBuffer(k, currentBuffer());
  reduceInto(dtype, static_cast<ReduceOp>(d.op), dst, nullptr, srcs.data(), n,
             count, factor, n);
}

// Bandwidth path: a pipelined reduce-scatter + all-gather. Chunks of
// chunk_bytes_, each split into n slices aligned to cache lines; rank r
// reduces slice r of every chunk straight from the peers' staging buffers,
// writes the reduced slice to the second part of its next buffer, and copies
// the other ranks' reduced slices out one step later. So the pipeline runs
// one step more than there are chunks: step t gathers chunk t-1, reduces
// chunk t and stages chunk t+1.
void Communicator::reduceChunked(const OpDesc& d, const char* src, char* dst,
                                 bool writer, double factor) {
  const auto dtype = static_cast<DataType>(d.dtype);
  const auto op = static_cast<ReduceOp>(d.op);
  const size_t count = d.count;
  const size_t esz = dtypeSize(dtype);
  const int n = world_;
  const size_t ce = chunk_bytes_ / esz;
  const size_t rounds = ceilDiv(count, ce);
  const size_t align = 64 / esz;
  std::vector<const void*> srcs(n);
  auto sliceBegin = [&](size_t len, int k) {
    if (k >= n) return len;
    return std::min(len, (len * size_t(k) / size_t(n)) / align * align);
  };
  auto copyIn = [&](size_t t, int b) {
    if (t >= rounds) return;
    const size_t off = t * ce, len = std::min(ce, count - off);
    const size_t sb = sliceBegin(len, rank_), se = sliceBegin(len, rank_ + 1);
    // The peers' slices only: ours is read in place.
    char* area = stagingBuffer(rank_, b);
    std::memcpy(area, src + off * esz, sb * esz);
    std::memcpy(area + se * esz, src + (off + se) * esz, (len - se) * esz);
  };
  auto reduceOwn = [&](size_t t, int b) {
    const size_t off = t * ce, len = std::min(ce, count - off);
    const size_t sb = sliceBegin(len, rank_), se = sliceBegin(len, rank_ + 1);
    if (se == sb) return;
    for (int k = 0; k < n; ++k)
      srcs[k] = k == rank_
                    ? src + (off + sb) * esz
                    : static_cast<const char*>(stagingBuffer(k, b)) + sb * esz;
    char* shared = stagingBuffer(rank_, b ^ 1) + chunk_bytes_ + sb * esz;
    if (writer)
      reduceInto(dtype, op, dst + (off + sb) * esz, shared, srcs.data(), n,
                 se - sb, factor, n);
    else
      reduceInto(dtype, op, shared, nullptr, srcs.data(), n, se - sb, factor,
                 n);
  };
  auto gather = [&](size_t t, int b) {
    if (!writer) return;
    const size_t off = t * ce, len = std::min(ce, count - off);
    for (int k = 0; k < n; ++k) {
      if (k == rank_) continue;
      const size_t sb = sliceBegin(len, k), se = sliceBegin(len, k + 1);
      std::memcpy(dst + (off + sb) * esz,
                  stagingBuffer(k, b) + chunk_bytes_ + sb * esz,
                  (se - sb) * esz);
    }
  };
  firstStep(d, copyIn);
  pipelinedSteps(rounds + 1, copyIn, [&](size_t t, int b) {
    if (t > 0) gather(t - 1, b);
    if (t < rounds) reduceOwn(t, b);
  });
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
  const size_t cb = staging_buffer_bytes_ / esz;
  const size_t rounds = std::max<size_t>(1, ceilDiv(count, cb));
  auto copyIn = [&](size_t t, int b) {
    const size_t off = t * cb;
    if (rank_ == root && off < count)
      std::memcpy(stagingBuffer(root, b), p + off * esz,
                  std::min(cb, count - off) * esz);
  };
  firstStep(d, copyIn);
  pipelinedSteps(rounds, copyIn, [&](size_t t, int b) {
    const size_t off = t * cb;
    if (rank_ != root && off < count)
      std::memcpy(p + off * esz, stagingBuffer(root, b),
                  std::min(cb, count - off) * esz);
  });
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

// Every rank stages its own block in chunks of a whole staging buffer; the
// receivers copy all the others' chunks out.
void Communicator::gatherImpl(const void* in, void* out,
                              const std::vector<size_t>& counts, DataType dtype,
                              int root, int kind) {
  const int n = world_;
  if (counts.size() != size_t(n))
    invalid(std::string(op_name_) + ": " + std::to_string(counts.size()) +
            " counts for " + std::to_string(n) + " ranks");
  const size_t esz = dtypeSize(dtype);
  const bool receiver = root < 0 || rank_ == root;
  const std::vector<size_t> displ = displacements(counts);
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
  const size_t cb = staging_buffer_bytes_ / esz;
  const size_t maxc = *std::max_element(counts.begin(), counts.end());
  const size_t rounds = std::max<size_t>(1, ceilDiv(maxc, cb));
  auto copyIn = [&](size_t t, int b) {
    const size_t off = t * cb;
    if (off < mine)
      std::memcpy(stagingBuffer(rank_, b), src + off * esz,
                  std::min(cb, mine - off) * esz);
  };
  firstStep(d, copyIn);
  // Our own block is copied directly (memmove: `in` may lie inside `out`),
  // after the barrier, when chunk 0 of it is already staged.
  if (receiver && mine && dst + displ[rank_] * esz != src)
    std::memmove(dst + displ[rank_] * esz, src, mine * esz);
  pipelinedSteps(rounds, copyIn, [&](size_t t, int b) {
    const size_t off = t * cb;
    for (int k = 0; receiver && k < n; ++k)
      if (k != rank_ && off < counts[k])
        std::memcpy(dst + (displ[k] + off) * esz, stagingBuffer(k, b),
                    std::min(cb, counts[k] - off) * esz);
  });
}

// The root's staging buffer is split into one sub-area per destination.
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
  const std::vector<size_t> displ = displacements(counts);
  if ((counts[rank_] && !out) || (rank_ == root && displ[n] && !in))
    invalid("scatter: null buffer");
  const OpDesc d{++op_seq_, displ[n],  hashCounts(counts),
                 root,      kScatterV, static_cast<uint8_t>(dtype),
                 0,         0};
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  const size_t sub = (staging_buffer_bytes_ / n) / 64 * 64;
  const size_t cb = sub / esz;
  size_t maxc = 0;
  for (int k = 0; k < n; ++k)
    if (k != root) maxc = std::max(maxc, counts[k]);
  const size_t rounds = std::max<size_t>(1, ceilDiv(maxc, cb));
  auto copyIn = [&](size_t t, int b) {
    if (rank_ == root)
      stageBlocksForPeers(stagingBuffer(root, b), sub, t, root, src, counts,
                          displ, esz);
  };
  firstStep(d, copyIn);
  if (rank_ == root && counts[root] && dst != src + displ[root] * esz)
    std::memmove(dst, src + displ[root] * esz, counts[root] * esz);
  pipelinedSteps(rounds, copyIn, [&](size_t t, int b) {
    const size_t off = t * cb;
    if (rank_ != root && off < counts[rank_])
      std::memcpy(dst + off * esz, stagingBuffer(root, b) + rank_ * sub,
                  std::min(cb, counts[rank_] - off) * esz);
  });
}

void Communicator::reduceScatter(const void* in, void* out, size_t count,
                                 DataType dtype, ReduceOp op, double factor) {
  reduceScatterV(in, out, std::vector<size_t>(world_, count), dtype, op,
                 factor);
}

// Each rank's staging buffer has one sub-area per destination block; rank r
// reduces block r straight from the peers' sub-areas r and its own input.
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
  const std::vector<size_t> displ = displacements(counts);
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
  const size_t sub = (staging_buffer_bytes_ / n) / 64 * 64;
  const size_t cb = sub / esz;
  const size_t maxc = *std::max_element(counts.begin(), counts.end());
  const size_t rounds = std::max<size_t>(1, ceilDiv(maxc, cb));
  std::vector<const void*> srcs(n);
  auto copyIn = [&](size_t t, int b) {
    stageBlocksForPeers(stagingBuffer(rank_, b), sub, t, rank_, src, counts,
                        displ, esz);
  };
  firstStep(d, copyIn);
  pipelinedSteps(rounds, copyIn, [&](size_t t, int b) {
    const size_t off = t * cb;
    if (off >= counts[rank_]) return;
    for (int k = 0; k < n; ++k)
      srcs[k] = k == rank_ ? src + (displ[rank_] + off) * esz
                           : static_cast<const char*>(stagingBuffer(k, b)) +
                                 rank_ * sub;
    reduceInto(dtype, op, dst + off * esz, nullptr, srcs.data(), n,
               std::min(cb, counts[rank_] - off), factor, n);
  });
}

void Communicator::allToAll(const void* in, void* out, size_t count,
                            DataType dtype) {
  const size_t b = count * dtypeSize(dtype);
  std::vector<size_t> bytes(world_, b), offs(world_);
  for (int k = 0; k < world_; ++k) offs[k] = size_t(k) * b;
  allToAllV(in, bytes, offs, out, bytes, offs);
}

// Staging buffer layout: this rank's row of the size matrix (what it sends
// to, then what it expects from, each rank), then one sub-area per
// destination. The sizes travel with chunk 0, so the number of steps is
// known only after the first barrier.
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
  const size_t row_bytes = alignUp(2 * size_t(n) * sizeof(uint64_t), 64);
  const size_t sub = ((staging_buffer_bytes_ - row_bytes) / n) / 64 * 64;
  auto copyIn = [&](size_t t, int b) {
    stageBlocksForPeers(stagingBuffer(rank_, b) + row_bytes, sub, t, rank_, src,
                        send_bytes, send_offsets, 1);
  };
  firstStep(d, [&](size_t t, int b) {
    auto* row = reinterpret_cast<uint64_t*>(stagingBuffer(rank_, b));
    for (int k = 0; k < n; ++k) {
      row[k] = send_bytes[k];
      row[n + k] = recv_bytes[k];
    }
    copyIn(t, b);
  });
  const size_t max_bytes = checkSplitSizes(d.seq);
  if (send_bytes[rank_])
    std::memmove(dst + recv_offsets[rank_], src + send_offsets[rank_],
                 send_bytes[rank_]);
  const size_t rounds = std::max<size_t>(1, ceilDiv(max_bytes, sub));
  pipelinedSteps(rounds, copyIn, [&](size_t t, int b) {
    const size_t off = t * sub;
    for (int j = 0; j < n; ++j)
      if (j != rank_ && off < recv_bytes[j])
        std::memcpy(dst + recv_offsets[j] + off,
                    stagingBuffer(j, b) + row_bytes + rank_ * sub,
                    std::min(sub, recv_bytes[j] - off));
  });
}

// Checks the size matrix of an all-to-all (every rank's row, staged with
// chunk 0) and returns the largest message between two different ranks.
// Every rank checks the whole matrix, so all of them agree on whether to
// fail and on the number of steps.
size_t Communicator::checkSplitSizes(uint64_t seq) {
  const int n = world_;
  size_t max_bytes = 0;
  std::vector<int> bad;
  std::string detail;
  for (int j = 0; j < n; ++j) {
    const auto* rj =
        reinterpret_cast<const uint64_t*>(stagingBuffer(j, currentBuffer()));
    for (int k = 0; k < n; ++k) {
      const auto* rk =
          reinterpret_cast<const uint64_t*>(stagingBuffer(k, currentBuffer()));
      if (rj[k] != rk[n + j]) {
        if (detail.size() < 400)
          detail += "; rank " + std::to_string(j) + " sends " +
                    std::to_string(rj[k]) + " bytes to rank " +
                    std::to_string(k) + ", which expects " +
                    std::to_string(rk[n + j]);
        if (std::find(bad.begin(), bad.end(), j) == bad.end()) bad.push_back(j);
      }
      if (j != k) max_bytes = std::max<size_t>(max_bytes, rj[k]);
    }
  }
  if (!bad.empty())
    fail(FailureKind::kMismatch,
         "allToAll (collective #" + std::to_string(seq) + " on communicator '" +
             name_ + "'): split sizes disagree" + detail,
         bad);
  return max_bytes;
}

void Communicator::barrier() {
  beginOp("barrier");
  const OpDesc d{++op_seq_, 0, 0, -1, kBarrier, 0, 0, 0};
  firstStep(d, [](size_t, int) {});
}

}  // namespace collectives
}  // namespace neuron_rt
