#include "neuron_runtime/device_memory_protection.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "neuron_runtime/status.h"

namespace neuron_rt {
namespace {

constexpr const char* kEnvVar = "TORCH_NEURONX_PROTECT_DEVICE_MEMORY";

// -1: not decided yet; 0 off; 1 on.
std::atomic<int> g_mode{-1};

// The protected arenas. A fixed table of atomics: the SIGSEGV handler reads
// it without a lock.
constexpr int kMaxArenas = 256;
struct ArenaSlot {
  std::atomic<uintptr_t> base{0};
  std::atomic<size_t> bytes{0};
};
ArenaSlot g_arenas[kMaxArenas];
int g_arena_count = 0;  // slots in use or freed (g_mu)

std::mutex g_mu;  // g_open, g_arena_count, the protection of the arenas
int g_open = 0;   // DeviceMemoryAccess openings alive

struct sigaction g_previous_segv;

void protectAllLocked(int prot) {
  for (int i = 0; i < g_arena_count; ++i) {
    const uintptr_t base = g_arenas[i].base.load(std::memory_order_relaxed);
    if (!base) continue;
    if (mprotect(reinterpret_cast<void*>(base),
                 g_arenas[i].bytes.load(std::memory_order_relaxed), prot) != 0)
      throw Error(Status::kDeviceError,
                  std::string("mprotect of neuron device memory failed: ") +
                      std::strerror(errno));
  }
}

// Async-signal-safe output of the message.
void writeFaultMessage(const void* addr) {
  char buf[128];
  const char head[] = "host access to neuron device memory at 0x";
  size_t n = 0;
  for (char c : head)
    if (c) buf[n++] = c;
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  bool started = false;
  for (int shift = 60; shift >= 0; shift -= 4) {
    const int d = static_cast<int>((a >> shift) & 0xf);
    if (d || started || shift == 0) {
      buf[n++] = "0123456789abcdef"[d];
      started = true;
    }
  }
  const char tail[] =
      " (missing synchronize? a host read of a neuron tensor's memory outside "
      "device work; TORCH_NEURONX_PROTECT_DEVICE_MEMORY=1)\n";
  ssize_t ignored = write(STDERR_FILENO, buf, n);
  ignored = write(STDERR_FILENO, tail, sizeof(tail) - 1);
  (void)ignored;
}

void onSegv(int sig, siginfo_t* info, void* context) {
  if (info && inProtectedArena(info->si_addr)) writeFaultMessage(info->si_addr);
  // The previous handler, or the default action: returning re-runs the
  // faulting access, which then ends the process with SIGSEGV.
  const struct sigaction& prev = g_previous_segv;
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) {
      prev.sa_sigaction(sig, info, context);
      return;
    }
  } else if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  signal(SIGSEGV, SIG_DFL);
}

void installSegvHandlerLocked() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = onSegv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_previous_segv);
}

// fork: the child has one thread and none of the workers that held access
// open; it starts closed.
void beforeFork() { g_mu.lock(); }
void afterForkParent() { g_mu.unlock(); }
void afterForkChild() {
  g_open = 0;
  try {
    protectAllLocked(PROT_NONE);
  } catch (...) {
  }
  g_mu.unlock();
}

}  // namespace

bool deviceMemoryProtected() {
  int mode = g_mode.load(std::memory_order_relaxed);
  if (mode >= 0) return mode == 1;
  const char* v = std::getenv(kEnvVar);
  if (!v || !*v || std::strcmp(v, "0") == 0) {
    mode = 0;
  } else if (std::strcmp(v, "1") == 0) {
    mode = 1;
  } else {
    throw Error(Status::kInvalidConfig, std::string("invalid ") + kEnvVar +
                                            "='" + v + "': expected 0 or 1");
  }
  int expected = -1;
  g_mode.compare_exchange_strong(expected, mode);
  return g_mode.load(std::memory_order_relaxed) == 1;
}

void setDeviceMemoryProtection(bool on) {
  std::lock_guard<std::mutex> g(g_mu);
  for (int i = 0; i < g_arena_count; ++i)
    if (g_arenas[i].base.load(std::memory_order_relaxed))
      throw Error(Status::kInvalidArgument,
                  "device memory protection can only change while no "
                  "device memory exists");
  g_mode.store(on ? 1 : 0);
}

void DeviceMemoryAccess::open() {
  std::lock_guard<std::mutex> g(g_mu);
  if (g_open++ == 0) protectAllLocked(PROT_READ | PROT_WRITE);
}

void DeviceMemoryAccess::close() {
  std::lock_guard<std::mutex> g(g_mu);
  if (--g_open == 0) protectAllLocked(PROT_NONE);
}

bool DeviceMemoryAccess::isOpen() {
  std::lock_guard<std::mutex> g(g_mu);
  return g_open > 0;
}

void registerProtectedArena(void* base, size_t bytes) {
  std::lock_guard<std::mutex> g(g_mu);
  static std::once_flag atfork;
  std::call_once(atfork, [] {
    pthread_atfork(beforeFork, afterForkParent, afterForkChild);
  });
  installSegvHandlerLocked();
  int slot = -1;
  for (int i = 0; i < g_arena_count && slot < 0; ++i)
    if (!g_arenas[i].base.load(std::memory_order_relaxed)) slot = i;
  if (slot < 0) {
    if (g_arena_count == kMaxArenas)
      throw Error(Status::kInvalidConfig,
                  "more than " + std::to_string(kMaxArenas) +
                      " protected device memory arenas");
    slot = g_arena_count++;
  }
  g_arenas[slot].bytes.store(bytes, std::memory_order_relaxed);
  g_arenas[slot].base.store(reinterpret_cast<uintptr_t>(base),
                            std::memory_order_release);
  if (g_open > 0 && mprotect(base, bytes, PROT_READ | PROT_WRITE) != 0)
    throw Error(Status::kDeviceError,
                std::string("mprotect of neuron device memory failed: ") +
                    std::strerror(errno));
}

void unregisterProtectedArena(void* base) {
  std::lock_guard<std::mutex> g(g_mu);
  for (int i = 0; i < g_arena_count; ++i)
    if (g_arenas[i].base.load(std::memory_order_relaxed) ==
        reinterpret_cast<uintptr_t>(base))
      g_arenas[i].base.store(0, std::memory_order_release);
}

bool inProtectedArena(const void* addr) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  for (int i = 0; i < kMaxArenas; ++i) {
    const uintptr_t base = g_arenas[i].base.load(std::memory_order_acquire);
    if (base && a >= base &&
        a - base < g_arenas[i].bytes.load(std::memory_order_relaxed))
      return true;
  }
  return false;
}

}  // namespace neuron_rt
