#include "neuron_runtime/collectives/shm_segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <new>
#include <utility>

#include "neuron_runtime/collectives/types.h"

namespace neuron_rt {
namespace collectives {
namespace {

std::string errnoText(int err) { return std::strerror(err); }

[[noreturn]] void setupError(const std::string& what) {
  throw CollectiveError(FailureKind::kSetup, "neuron collectives: " + what);
}

// The creator pid of a segment, or 0 if it is not initialised yet.
int creatorOf(int fd, size_t size) {
  if (size < sizeof(SegmentPrologue)) return 0;
  void* p =
      mmap(nullptr, sizeof(SegmentPrologue), PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return 0;
  const auto* pro = static_cast<const SegmentPrologue*>(p);
  int pid = pro->creator_pid;
  munmap(p, sizeof(SegmentPrologue));
  return pid;
}

}  // namespace

bool processAlive(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return errno != ESRCH;  // EPERM: exists
  // A process that died but was not reaped yet (a zombie) still answers
  // kill(); its state in /proc says otherwise.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (!f) return true;  // no /proc: trust kill()
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "pid (comm) S ...": the state follows the last ')' (comm may hold any).
  const char* close_paren = std::strrchr(buf, ')');
  if (!close_paren || close_paren[1] != ' ') return true;
  const char state = close_paren[2];
  return state != 'Z' && state != 'X' && state != 'x';
}

ShmSegment::~ShmSegment() { release(); }

ShmSegment::ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    release();
    name_ = std::move(o.name_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    creator_ = std::exchange(o.creator_, false);
    unlinked_ = std::exchange(o.unlinked_, true);
  }
  return *this;
}

void ShmSegment::release() {
  // A creator whose rendezvous never completed removes the name itself.
  if (creator_ && !unlinked_) unlink();
  if (data_) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

std::string ShmSegment::filePrefix() {
  return "tnx-" + std::to_string(static_cast<unsigned>(getuid())) + "-";
}

std::string ShmSegment::shmName(const std::string& name) {
  return "/" + filePrefix() + name;
}

ShmSegment ShmSegment::create(const std::string& shm_name, size_t bytes) {
  int fd = -1;
  for (int attempt = 0; attempt < 2 && fd < 0; ++attempt) {
    fd = shm_open(shm_name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0 || errno != EEXIST) break;
    // Left over from a job that died during its rendezvous? Then replace it.
    int old = shm_open(shm_name.c_str(), O_RDONLY, 0);
    int creator = 0;
    if (old >= 0) {
      struct stat st{};
      if (fstat(old, &st) == 0)
        creator = creatorOf(old, static_cast<size_t>(st.st_size));
      close(old);
    }
    if (creator != 0 && processAlive(creator))
      setupError("shared-memory segment " + shm_name +
                 " is already in use by process " + std::to_string(creator) +
                 "; each communicator needs a unique name");
    shm_unlink(shm_name.c_str());
  }
  if (fd < 0)
    setupError("cannot create shared-memory segment " + shm_name + ": " +
               errnoText(errno));
  ShmSegment seg;
  seg.name_ = shm_name;
  seg.creator_ = true;
  auto fail = [&](const std::string& what) {
    int err = errno;
    close(fd);
    seg.release();
    setupError(
        what + " " + shm_name + " (" + std::to_string(bytes >> 20) +
        " MiB): " + errnoText(err) +
        (err == ENOSPC ? "; /dev/shm is too small (docker: --shm-size)" : ""));
  };
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0)
    fail("cannot size shared-memory segment");
  // Reserve the pages now: running out of /dev/shm later would be a SIGBUS.
  int rc = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != 0) {
    errno = rc;
    fail("cannot reserve shared memory for");
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) fail("cannot map shared-memory segment");
  close(fd);
  seg.data_ = p;
  seg.size_ = bytes;
  auto* pro = static_cast<SegmentPrologue*>(p);
  pro->version = kVersion;
  pro->creator_pid = static_cast<int32_t>(getpid());
  pro->total_bytes = bytes;
  return seg;
}

bool ShmSegment::tryOpen(const std::string& shm_name, ShmSegment* out) {
  int fd = shm_open(shm_name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    if (errno == ENOENT) return false;
    setupError("cannot open shared-memory segment " + shm_name + ": " +
               errnoText(errno));
  }
  struct stat st{};
  if (fstat(fd, &st) != 0 ||
      static_cast<size_t>(st.st_size) < sizeof(SegmentPrologue)) {
    close(fd);  // the creator has not sized it yet
    return false;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED)
    setupError("cannot map shared-memory segment " + shm_name + ": " +
               errnoText(err));
  ShmSegment seg;
  seg.name_ = shm_name;
  seg.data_ = p;
  seg.size_ = size;
  *out = std::move(seg);
  return true;
}

void ShmSegment::publish() {
  static_cast<SegmentPrologue*>(data_)->magic.store(kMagic,
                                                    std::memory_order_release);
}

bool ShmSegment::published() const {
  return data_ && prologue()->magic.load(std::memory_order_acquire) == kMagic;
}

void ShmSegment::unlink() {
  if (!unlinked_ && !name_.empty()) shm_unlink(name_.c_str());
  unlinked_ = true;
}

int ShmSegment::cleanupStale() {
  DIR* dir = opendir("/dev/shm");
  if (!dir) return 0;
  const std::string prefix = filePrefix();
  int removed = 0;
  while (dirent* e = readdir(dir)) {
    const std::string file = e->d_name;
    if (file.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string name = "/" + file;
    int fd = shm_open(name.c_str(), O_RDONLY, 0);
    if (fd < 0) continue;
    struct stat st{};
    bool stale = false;
    if (fstat(fd, &st) == 0) {
      int creator = creatorOf(fd, static_cast<size_t>(st.st_size));
      if (creator != 0)
        stale = !processAlive(creator);
      else  // never initialised: its creator died between open and init
        stale = time(nullptr) - st.st_mtime > 600;
    }
    close(fd);
    if (stale && shm_unlink(name.c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

}  // namespace collectives
}  // namespace neuron_rt
