#include "eager/op_stats.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "eager/host_fallback_ops.h"

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

// A view op (its results alias its inputs and it writes none): metadata
// only, nothing runs on the device. From the schema, once per op.
bool isViewOp(const c10::OperatorName& op) {
  static std::mutex mu;
  static std::unordered_map<std::string, bool> known;
  std::string key = op.name + "." + op.overload_name;
  std::lock_guard<std::mutex> g(mu);
  auto it = known.find(key);
  if (it != known.end()) return it->second;
  bool view = false;
  if (auto handle = c10::Dispatcher::singleton().findSchema(op)) {
    const auto& returns = handle->schema().returns();
    view = !returns.empty();
    for (const auto& r : returns)
      if (!r.alias_info() || r.alias_info()->isWrite()) view = false;
  }
  known.emplace(std::move(key), view);
  return view;
}

bool hasElements(const c10::IValue& v) {
  if (v.isTensor()) return !v.toTensor().defined() || v.toTensor().numel() > 0;
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList())
      if (t.numel() > 0) return true;
    return v.toTensorList().empty();
  }
  return true;  // not a tensor: not an empty result
}

// What a call's start tells its end (RecordFunction's inputs are valid only
// at the start: at the end the stack holds the results).
struct NeuronCall : at::ObserverContext {
  bool cat_of_one = false;
};

// Every operator call that reaches the dispatcher, composite ones included
// (full, ones, clone, linear, ...): recorded when it has a neuron tensor or
// the neuron device among its arguments, once it has returned (its results
// tell whether it computed anything). TorchNeuron's rules
// (docs/compatibility.md): view ops and calls with nothing to compute - every
// result an empty tensor (an all-false boolean mask's index, nonzero of it),
// cat of a single tensor - are not executed; the host-computed
// decompositions are fallbacks.
std::unique_ptr<at::ObserverContext> onOperatorCall(
    const at::RecordFunction& fn) {
  const auto op = fn.operator_name();
  if (!op || isViewOp(*op)) return nullptr;
  const auto inputs = fn.inputs();
  bool neuron = false;
  for (const c10::IValue& v : inputs)
    if (onNeuron(v)) {
      neuron = true;
      break;
    }
  if (!neuron) return nullptr;
  auto call = std::make_unique<NeuronCall>();
  call->cat_of_one = op->name == "aten::cat" && !inputs.empty() &&
                     inputs[0].isTensorList() &&
                     inputs[0].toTensorList().size() == 1;
  return call;
}

void onOperatorReturn(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  auto* call = static_cast<NeuronCall*>(ctx);
  if (!call || call->cat_of_one) return;
  bool any_tensor = false, computed = false;
  for (const c10::IValue& v : fn.outputs()) {
    if (!v.isTensor() && !v.isTensorList()) continue;
    any_tensor = true;
    if (hasElements(v)) computed = true;
  }
  if (any_tensor && !computed) return;
  const auto op = fn.operator_name();
  std::string name = op->name;
  if (!op->overload_name.empty()) name += "." + op->overload_name;
  noteExecuted(name);
}

}  // namespace

void trackOperatorCalls() {
  if (g_tracking_calls.exchange(true)) return;
  at::addGlobalCallback(
      at::RecordFunctionCallback(&onOperatorCall, &onOperatorReturn)
          .needsInputs(true)
          .needsOutputs(true)
          .scopes({at::RecordScope::FUNCTION}));
}

bool trackingOperatorCalls() { return g_tracking_calls.load(); }

void noteExecuted(const std::string& op_name) {
  std::lock_guard<std::mutex> g(g_mu);
  if (isHostFallbackOp(op_name))
    g_fallback.insert(op_name);
  else
    g_executed.insert(op_name);
}

void noteExecutedOnce(const char* op_name, std::atomic<uint32_t>& seen) {
  // While every call is tracked, the dispatcher's record is the one kept: it
  // sees the call's results, which decide whether it computed anything.
  if (g_tracking_calls.load(std::memory_order_relaxed)) return;
  uint32_t gen = g_generation.load(std::memory_order_relaxed);
  if (seen.load(std::memory_order_relaxed) == gen) return;
  noteExecuted(op_name);
  seen.store(gen, std::memory_order_relaxed);
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
