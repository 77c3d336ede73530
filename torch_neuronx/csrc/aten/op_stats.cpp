#include "aten/op_stats.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <mutex>
#include <set>

namespace torch_neuronx {
namespace {

std::mutex g_mu;
std::set<std::string> g_executed;
std::set<std::string> g_fallback;
std::set<std::string> g_warned;
// Starts at 1 so that a zero-initialised `seen` means "not yet recorded".
std::atomic<uint32_t> g_generation{1};

}  // namespace

void noteExecuted(const std::string& op_name) {
  std::lock_guard<std::mutex> g(g_mu);
  g_executed.insert(op_name);
}

void noteExecutedOnce(const char* op_name, std::atomic<uint32_t>& seen) {
  uint32_t gen = g_generation.load(std::memory_order_relaxed);
  if (seen.load(std::memory_order_relaxed) == gen) return;
  noteExecuted(op_name);
  seen.store(gen, std::memory_order_relaxed);
}

void noteFallback(const std::string& op_name, const std::string& why) {
  bool warn;
  {
    std::lock_guard<std::mutex> g(g_mu);
    g_fallback.insert(op_name);
    warn = g_warned.insert(op_name).second;
  }
  if (warn)
    TORCH_WARN("neuron: ", op_name,
               " ran through a host round trip (inputs copied to the host and "
               "results back): ",
               why);
}

std::vector<std::string> executedOps() {
  std::lock_guard<std::mutex> g(g_mu);
  return {g_executed.begin(), g_executed.end()};
}

std::vector<std::string> fallbackOps() {
  std::lock_guard<std::mutex> g(g_mu);
  return {g_fallback.begin(), g_fallback.end()};
}

void clearOpStats() {
  std::lock_guard<std::mutex> g(g_mu);
  g_executed.clear();
  g_fallback.clear();
  g_generation.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace torch_neuronx
