// A POSIX shared-memory segment for the processes of one communicator.
//
// The creator (rank 0) makes it with O_EXCL, sizes it and reserves its pages
// up front (fallocate), so that a /dev/shm that is too small is an error at
// creation instead of a SIGBUS in the middle of a collective. Segments live
// under "/tnx-<uid>-<name>"; the communicator unlinks the name as soon as
// every rank has mapped it, so a job that is later SIGKILLed leaves nothing
// behind. What can leak is a segment whose rendezvous never completed (its
// creator died first); cleanupStale() removes those, recognising them by the
// creator pid stored in the segment's prologue.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace neuron_rt {
namespace collectives {

// The first bytes of every segment. `magic` is written last by the creator
// (release), so a reader that sees it also sees everything the creator
// initialised before publish().
struct SegmentPrologue {
  std::atomic<uint32_t> magic;
  uint32_t version;
  int32_t creator_pid;
  uint32_t reserved;
  uint64_t total_bytes;
};

class ShmSegment {
 public:
  static constexpr uint32_t kMagic = 0x54'4E'58'43;  // "TNXC"
  static constexpr uint32_t kVersion = 1;

  ShmSegment() = default;
  ~ShmSegment();
  ShmSegment(ShmSegment&& o) noexcept;
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // The shm name ("/tnx-<uid>-<name>") for a caller-chosen communicator name.
  static std::string shmName(const std::string& name);
  // The prefix of this user's segment files in /dev/shm ("tnx-<uid>-").
  static std::string filePrefix();

  // Creates, sizes, reserves and maps a new segment; fills in the prologue
  // except `magic`. Throws CollectiveError(kSetup) on failure; an existing
  // segment of that name whose creator is dead is replaced.
  static ShmSegment create(const std::string& shm_name, size_t bytes);
  // Maps an existing segment. Returns false (and leaves *out alone) if it does
  // not exist yet or its creator has not sized it yet; throws on other
  // errors.
  static bool tryOpen(const std::string& shm_name, ShmSegment* out);

  // Makes the segment visible to openers that wait for the magic.
  void publish();
  bool published() const;

  // Removes the name (idempotent; the mapping stays valid).
  void unlink();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const SegmentPrologue* prologue() const {
    return static_cast<const SegmentPrologue*>(data_);
  }
  bool isCreator() const { return creator_; }
  const std::string& name() const { return name_; }

  // Removes this user's leftover segments whose creator process is dead (and
  // never-initialised ones older than ten minutes). Returns how many.
  static int cleanupStale();

 private:
  void release();

  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool creator_ = false;
  bool unlinked_ = false;
};

// True if process `pid` exists and has not exited (EPERM counts as existing;
// a zombie does not). Pids are only meaningful within one pid namespace: all
// ranks of a communicator must share it.
bool processAlive(int pid);

}  // namespace collectives
}  // namespace neuron_rt
