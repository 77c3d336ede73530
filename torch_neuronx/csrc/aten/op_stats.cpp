#include "aten/op_stats.h"

#include <c10/util/Exception.h>

#include <mutex>
#include <set>

namespace torch_neuronx {
namespace {

std::mutex g_mu;
std::set<std::string> g_executed;
std::set<std::string> g_fallback;
std::set<std::string> g_warned;

}  // namespace

void noteExecuted(const std::string& op_name) {
  std::lock_guard<std::mutex> g(g_mu);
  g_executed.insert(op_name);
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
}

}  // namespace torch_neuronx
