#include "eager/random_op.h"

#include <ATen/ATen.h>

#include <optional>
#include <string>

#include "core/generator.h"
#include "eager/ivalue_tensors.h"
#include "eager/op_args.h"
#include "eager/synchronous_op.h"

namespace torch_neuronx {
namespace {

using c10::IValue;

bool isGeneratorArgument(const c10::Argument& arg) {
  const c10::TypePtr& type = arg.type();
  const c10::TypePtr& inner = type->kind() == c10::TypeKind::OptionalType
                                  ? type->containedType(0)
                                  : type;
  return inner->kind() == c10::TypeKind::GeneratorType;
}

// Tensor, Tensor?, Tensor[], Tensor?[].
bool holdsTensors(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::TensorType:
      return true;
    case c10::TypeKind::OptionalType:
    case c10::TypeKind::ListType:
      return holdsTensors(type->containedType(0));
    default:
      return false;
  }
}

// Ops that read a tensor argument only for its shape and dtype.
bool readsOnlyShapes(const std::string& name) {
  return name == "aten::bernoulli.p";
}

// A host tensor standing in for the device tensor `t`: the same sizes,
// strides and dtype, so the CPU kernel draws in the order it would draw for
// a CPU tensor like `t` (its values are never read).
at::Tensor standIn(const at::Tensor& t) {
  if (!t.defined() || !isNeuron(t)) return t;
  return at::empty_strided(t.sizes(), t.strides(),
                           t.options().device(c10::kCPU));
}

}  // namespace

void classifyRandomOp(const c10::FunctionSchema& schema, OpTraits& traits) {
  const auto& args = schema.arguments();
  bool random = false;
  bool reads = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::Argument& arg = args[i];
    if (isGeneratorArgument(arg)) random = true;
    const bool written =
        arg.is_out() || (arg.alias_info() && arg.alias_info()->isWrite());
    if (holdsTensors(arg.type()) && !written) reads = true;
  }
  traits.draws_random = random;
  traits.random_reads_values = random && reads && !readsOnlyShapes(traits.name);
}

void runRandomOp(const c10::OperatorHandle& op, OpTraits& traits,
                 torch::jit::Stack* stack, std::vector<IValue> args,
                 c10::DeviceIndex device) {
  const c10::FunctionSchema& schema = op.schema();
  std::optional<at::Generator> gen;
  for (size_t i = 0; i < args.size(); ++i)
    if (isGeneratorArgument(schema.arguments()[i]) && args[i].isGenerator())
      gen = args[i].toGenerator();
  RandomDraw draw(gen, device);
  if (traits.random_reads_values) {
    runSynchronously(op, traits, stack, std::move(args), device,
                     &draw.cpuGenerator());
    return;
  }
  torch::jit::Stack cpu_stack;
  cpu_stack.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    if (isGeneratorArgument(schema.arguments()[i])) {
      cpu_stack.push_back(IValue(draw.cpuGenerator()));
      continue;
    }
    cpu_stack.push_back(
        mapDevice(mapTensors(args[i], standIn), c10::Device(c10::kCPU)));
  }
  op.callBoxed(cpu_stack);  // the CPU kernel: every tensor is a host one
  std::vector<IValue> outs = placeCpuResults(schema, traits, args, cpu_stack,
                                             device, /*copy_written=*/true);
  torch::jit::drop(*stack, args.size());
  for (auto& o : outs) stack->push_back(std::move(o));
}

}  // namespace torch_neuronx
