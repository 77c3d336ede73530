// communicator_*.cpp: one class, a file per concern (they sort together).
// This one: point to point (ring-buffer mailboxes, send/recv, exchange).
#include <cstring>

#include "communicator_impl.h"

namespace neuron_rt {
namespace collectives {

namespace {

// Every message starts with this header, so that a receiver can check that
// the next message from a peer is the one it expects.
constexpr uint32_t kMsgMagic = 0x4D534731;  // "MSG1"
struct MsgHeader {
  uint32_t magic;
  int32_t tag;
  uint64_t bytes;
};
constexpr size_t kHdr = sizeof(MsgHeader);

std::string mismatchMessage(int rank, int src, size_t bytes, int tag,
                            const MsgHeader& got) {
  return "recv on rank " + std::to_string(rank) + " expected " +
         std::to_string(bytes) + " bytes with tag " + std::to_string(tag) +
         " from rank " + std::to_string(src) + ", but its next message has " +
         std::to_string(got.bytes) + " bytes with tag " +
         std::to_string(got.tag) + " (the message was dropped)";
}

}  // namespace

struct Communicator::Transfer {
  MsgHeader hdr;
  size_t moved = 0;  // header + payload bytes moved so far
  bool done = false;
};

// ----------------------------------------------------------- mailboxes

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

// ------------------------------------------------------- send and recv

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
    fail(FailureKind::kMismatch, mismatchMessage(rank_, src, bytes, tag, h),
         {src});
  }
  pop(src, static_cast<char*>(buf), bytes);
}

// ------------------------------------------------------------ exchange

namespace {

// Only the first unfinished op of each (direction, peer) may move: that
// keeps messages between two ranks in order.
template <class Transfers>
bool mayMove(const std::vector<Communicator::P2POp>& ops, const Transfers& st,
             size_t i) {
  if (st[i].done) return false;
  for (size_t j = 0; j < i; ++j)
    if (!st[j].done && ops[j].is_send == ops[i].is_send &&
        ops[j].peer == ops[i].peer)
      return false;
  return true;
}

}  // namespace

void Communicator::exchange(const std::vector<P2POp>& ops) {
  beginOp("sendRecv");
  std::vector<Transfer> st(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    if (op.peer < 0 || op.peer >= world_ || op.peer == rank_)
      invalid("sendRecv: rank " + std::to_string(op.peer) +
              " is not a peer of rank " + std::to_string(rank_));
    if (op.bytes && !op.buf) invalid("sendRecv: null buffer");
    st[i].hdr = MsgHeader{kMsgMagic, op.tag, op.bytes};
  }
  // A mismatched message is dropped and the rest completed before throwing,
  // so that every pair of ranks stays in step.
  std::string mismatch;
  std::vector<int> mismatch_ranks;
  for (;;) {
    bool all_done = true, moved = false;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!mayMove(ops, st, i)) {
        all_done = all_done && st[i].done;
        continue;
      }
      const size_t k =
          ops[i].is_send ? advanceSend(ops[i], st[i])
                         : advanceRecv(ops[i], st[i], mismatch, mismatch_ranks);
      moved = moved || k > 0;
      all_done = all_done && st[i].done;
    }
    if (all_done) break;
    if (!moved) awaitExchangeProgress(ops, st);
  }
  if (!mismatch.empty()) fail(FailureKind::kMismatch, mismatch, mismatch_ranks);
}

size_t Communicator::advanceSend(const P2POp& op, Transfer& s) {
  size_t k;
  if (s.moved < kHdr)
    k = tryPush(op.peer, reinterpret_cast<const char*>(&s.hdr) + s.moved,
                kHdr - s.moved);
  else
    k = tryPush(op.peer, static_cast<const char*>(op.buf) + (s.moved - kHdr),
                op.bytes - (s.moved - kHdr));
  s.moved += k;
  s.done = s.moved == kHdr + op.bytes;
  return k;
}

size_t Communicator::advanceRecv(const P2POp& op, Transfer& s,
                                 std::string& mismatch,
                                 std::vector<int>& mismatch_ranks) {
  size_t k;
  if (s.moved < kHdr) {
    // The header: once complete, check it against what we expect.
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
          mismatch = mismatchMessage(rank_, op.peer, op.bytes, op.tag, s.hdr);
        mismatch_ranks.push_back(op.peer);
      }
    }
  } else {
    // The payload; a mismatched message is drained and dropped.
    const bool drop = s.hdr.tag != op.tag || s.hdr.bytes != op.bytes;
    k = tryPop(op.peer,
               drop ? nullptr : static_cast<char*>(op.buf) + (s.moved - kHdr),
               s.hdr.bytes - (s.moved - kHdr));
    s.moved += k;
  }
  s.done = s.moved >= kHdr && s.moved == kHdr + s.hdr.bytes;
  return k;
}

// Sleeps on this rank's doorbell until one of the ops that may move can.
void Communicator::awaitExchangeProgress(
    const std::vector<P2POp>& ops, const std::vector<Transfer>& transfers) {
  waitUntil(
      ctrl_[rank_].doorbell,
      [&] {
        for (size_t i = 0; i < ops.size(); ++i) {
          if (!mayMove(ops, transfers, i)) continue;
          const P2POp& op = ops[i];
          if (op.is_send
                  ? canPush(op.peer, kHdr + op.bytes - transfers[i].moved)
                  : canPop(op.peer))
            return true;
        }
        return false;
      },
      [&] {
        std::vector<int> m;
        for (size_t i = 0; i < ops.size(); ++i)
          if (mayMove(ops, transfers, i) &&
              std::find(m.begin(), m.end(), ops[i].peer) == m.end())
            m.push_back(ops[i].peer);
        return m;
      },
      "send or receive");
}

}  // namespace collectives
}  // namespace neuron_rt
