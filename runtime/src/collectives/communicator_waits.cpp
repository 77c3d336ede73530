// communicator_*.cpp: one class, a file per concern (they sort together).
// This one: failures (deadlines, abort, dead peers, timeouts) for the waits.
#include <cstring>

#include "communicator_impl.h"

namespace neuron_rt {
namespace collectives {

namespace {

std::string joinRanks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i)
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s.empty() ? "none" : s;
}

}  // namespace

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
  deadline_ = Clock::now() + timeout();
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
  FailureKind kind = FailureKind::kAborted;
  std::vector<int> ranks{by};
  // The aborting rank writes its cause after winning the flag: a rank that
  // sees the flag first reports a plain abort by that rank.
  if (hdr_->abort_reason_ready.load(std::memory_order_acquire)) {
    reason =
        std::string(hdr_->abort_reason,
                    strnlen(hdr_->abort_reason, sizeof hdr_->abort_reason));
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

std::vector<int> Communicator::goneAmong(const std::vector<int>& ranks) const {
  std::vector<int> gone;
  for (int r : ranks) {
    // kill(pid, 0) and /proc: a zombie counts as dead.
    const int pid = ctrl_[r].pid.load(std::memory_order_acquire);
    if (ctrl_[r].left.load(std::memory_order_acquire) ||
        (pid != 0 && !processAlive(pid)))
      gone.push_back(r);
  }
  return gone;
}

void Communicator::failPeersGone(const std::vector<int>& gone,
                                 const char* verb) {
  std::string pids;
  for (int r : gone)
    pids +=
        (pids.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) +
        " (pid " + std::to_string(ctrl_[r].pid.load()) +
        (ctrl_[r].left.load() ? ") destroyed its communicator" : ") exited");
  fail(FailureKind::kPeerDied,
       std::string(op_name_) + " on rank " + std::to_string(rank_) + " of " +
           std::to_string(world_) + " (communicator '" + name_ + "'): " + pids +
           " while rank " + std::to_string(rank_) + " waited for it to " + verb,
       gone);
}

void Communicator::setTimeout(std::chrono::milliseconds timeout) {
  timeout_ns_.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count(),
      std::memory_order_relaxed);
}

std::chrono::milliseconds Communicator::timeout() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::nanoseconds(timeout_ns_.load(std::memory_order_relaxed)));
}

void Communicator::failTimeout(const std::vector<int>& missing,
                               const char* verb) {
  const auto ms = timeout();
  fail(FailureKind::kTimeout,
       std::string(op_name_) + " on rank " + std::to_string(rank_) + " of " +
           std::to_string(world_) + " (communicator '" + name_ +
           "') timed out after " + std::to_string(ms.count()) +
           " ms; ranks that did not " + verb + ": " + joinRanks(missing) +
           " (hung, busy elsewhere, or calling a different collective; "
           "raise the timeout if they are just slow)",
       missing);
}

}  // namespace collectives
}  // namespace neuron_rt
