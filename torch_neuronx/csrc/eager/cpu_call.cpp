#include "eager/cpu_call.h"

#include <ATen/ATen.h>

#include <optional>

#include "eager/device_check.h"
#include "eager/ivalue_tensors.h"
#include "eager/random_op_traits.h"

namespace torch_neuronx {
namespace {

using c10::IValue;

const at::Tensor& placeholder() {
  static const at::Tensor p = at::empty({0});
  return p;
}

}  // namespace

IValue CpuCall::record(const IValue& v) {
  return mapTensors(v, [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined() || isNeuron(t))
      plan.add(t);
    else
      plan.keep(t.clone());  // a CPU scalar: its value now
    return t.defined() ? placeholder() : t;
  });
}

IValue CpuCall::substitute(const IValue& v, const AliasPlan::Built& built,
                           size_t& next) {
  return mapTensors(
      v, [&](const at::Tensor&) -> at::Tensor { return built[next++]; });
}

torch::jit::Stack CpuCall::run(const AliasPlan::Built& built,
                               size_t& next) const {
  torch::jit::Stack stack;
  stack.reserve(args.size());
  for (const IValue& v : args) stack.push_back(substitute(v, built, next));
  op.callBoxed(stack);
  return stack;
}

void buildCpuArgs(CpuCall& call, const std::vector<IValue>& args,
                  const c10::FunctionSchema& schema, bool fresh_out_args,
                  const OpTraits& traits) {
  call.args.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const IValue& v = args[i];
    TORCH_INTERNAL_ASSERT(!isGeneratorArgument(schema.arguments()[i]),
                          traits.name, ": random ops take random_op.h's path");
    if (fresh_out_args && traits.arg_is_out[i] && v.isTensor()) {
      call.args.push_back(call.record(
          at::empty({0}, v.toTensor().options().device(c10::kCPU))));
      continue;
    }
    call.args.push_back(mapDevice(call.record(v), c10::Device(c10::kCPU)));
  }
}

}  // namespace torch_neuronx
