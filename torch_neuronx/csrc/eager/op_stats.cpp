#include "eager/op_stats.h"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <mutex>
#include <set>

namespace torch_neuronx {
namespace {

std::mutex g_mu;
std::set<std::string> g_executed;
std::set<std::string> g_fallback;
// Starts at 1 so that a zero-initialised `seen` means "not yet recorded".
std::atomic<uint32_t> g_generation{1};

std::atomic<bool> g_tracking_calls{false};

bool onNeuron(const c10::IValue& v) {
  if (v.isTensor()) return v.toTensor().is_privateuseone();
  if (v.isDevice()) return v.toDevice().type() == c10::DeviceType::PrivateUse1;
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList())
      if (t.defined() && t.is_privateuseone()) return true;
  }
  return false;
}

// Every operator call that reaches the dispatcher, composite ones included
// (full, ones, clone, linear, ...): recorded when it has a neuron tensor or
// the neuron device among its arguments.
std::unique_ptr<at::ObserverContext> onOperatorCall(
    const at::RecordFunction& fn) {
  const auto op = fn.operator_name();
  if (!op) return nullptr;
  bool neuron = false;
  for (const c10::IValue& v : fn.inputs())
    if (onNeuron(v)) {
      neuron = true;
      break;
    }
  if (!neuron) return nullptr;
  std::string name = op->name;
  if (!op->overload_name.empty()) name += "." + op->overload_name;
  noteExecuted(name);
  return nullptr;
}

}  // namespace

void trackOperatorCalls() {
  if (g_tracking_calls.exchange(true)) return;
  at::addGlobalCallback(at::RecordFunctionCallback(&onOperatorCall)
                            .needsInputs(true)
                            .scopes({at::RecordScope::FUNCTION}));
}

bool trackingOperatorCalls() { return g_tracking_calls.load(); }

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

void noteFallback(const std::string& op_name) {
  std::lock_guard<std::mutex> g(g_mu);
  g_fallback.insert(op_name);
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
