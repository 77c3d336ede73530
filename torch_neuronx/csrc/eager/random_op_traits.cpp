#include "eager/random_op_traits.h"

#include <string>

namespace torch_neuronx {
namespace {

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

}  // namespace

// In-place random ops that read the tensor they write (the others — normal_,
// uniform_, bernoulli_, ... — overwrite it whole).
bool readsWhatItWrites(const std::string& name) {
  return name == "aten::rrelu_with_noise_";
}

bool isGeneratorArgument(const c10::Argument& arg) {
  const c10::TypePtr& type = arg.type();
  const c10::TypePtr& inner = type->kind() == c10::TypeKind::OptionalType
                                  ? type->containedType(0)
                                  : type;
  return inner->kind() == c10::TypeKind::GeneratorType;
}

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
  traits.random_reads_values =
      random && ((reads && !readsOnlyShapes(traits.name)) ||
                 readsWhatItWrites(traits.name));
}

}  // namespace torch_neuronx
