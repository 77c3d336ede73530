#include "eager/op_traits.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "eager/dtype_widening.h"
#include "eager/random_op_traits.h"
#include "eager/schema_aliases.h"

namespace torch_neuronx {
namespace {

using c10::IValue;

// Ops whose Meta kernel describes the CUDA kernel's outputs rather than the
// CPU kernel's: batch norm's saved statistics (on CPU empty when not
// training, and in the input's dtype), embedding_bag's offset2bag and
// bag_size. The CPU kernel decides their outputs, so they run synchronously.
bool metaDiffersFromCpu(const std::string& name) {
  static const std::unordered_set<std::string> ops = {
      "aten::native_batch_norm", "aten::_native_batch_norm_legit",
      "aten::_batch_norm_with_update", "aten::_embedding_bag",
      "aten::_embedding_bag_forward_only",
      // Without need_weights the CPU kernel returns no attention weights
      // (an undefined tensor, as CUDA's); the Meta kernel makes an empty one.
      "aten::_native_multi_head_attention",
      // Its Meta kernel says float32; the CPU's result is quantized, which
      // the synchronous path refuses at the call (checkUnquantizedResult).
      "aten::quantize_per_tensor"};
  return ops.count(name) > 0;
}

// layer_norm on CPU keeps mean and rstd in the input's dtype; the Meta
// kernel (CUDA's convention) makes them float32 for half inputs.
void layerNormStatsInInputDtype(CachedMeta& m,
                                const std::vector<IValue>& args) {
  c10::ScalarType dtype = args[0].toTensor().scalar_type();
  for (size_t i = 1; i < m.returns.size(); ++i)
    for (TensorMeta& t : m.returns[i]) t.dtype = dtype;
}

// The margin losses without reduction, for a 0-dim or 1-dim input, return a
// 0-dim loss on CPU (and CUDA) where their Meta kernel says [1]: always for
// multilabel_margin_loss, and for multi_margin_loss when its target is 0-dim
// (a [1] target gives a [1] loss). `reduction` is the argument's position
// (the out= overloads have theirs at the same place, before `out`).
void unreducedLossIsZeroDim(CachedMeta& m, const std::vector<IValue>& args,
                            size_t reduction_at, bool unless_target_has_dims) {
  const int64_t reduction = args.at(reduction_at).toInt();
  if (reduction != 0 || args[0].toTensor().dim() > 1) return;
  if (unless_target_has_dims && args[1].toTensor().dim() > 0) return;
  TensorMeta& loss = m.returns.at(0).at(0);
  loss.sizes.clear();
  loss.strides.clear();
}

void multiMarginLossUnreducedShape(CachedMeta& m,
                                   const std::vector<IValue>& args) {
  // (self, target, p, margin, weight, reduction)
  unreducedLossIsZeroDim(m, args, 5, /*unless_target_has_dims=*/true);
}

void multilabelMarginLossUnreducedShape(CachedMeta& m,
                                        const std::vector<IValue>& args) {
  // (self, target, reduction)
  unreducedLossIsZeroDim(m, args, 2, /*unless_target_has_dims=*/false);
}

// linalg_eig's C++ Meta kernel makes the eigenvectors row-major; the CPU and
// CUDA kernels (LAPACK / MAGMA) return them column-major, and so do the
// compiler's fake tensors (torch/_meta_registrations.py).
void eigenvectorsColumnMajor(CachedMeta& m, const std::vector<IValue>&) {
  TensorMeta& v = m.returns.at(1).at(0);
  const size_t d = v.sizes.size();
  if (d < 2) return;
  std::vector<int64_t> strides(d);
  strides[d - 2] = 1;
  strides[d - 1] = std::max<int64_t>(v.sizes[d - 2], 1);
  int64_t step = strides[d - 1] * std::max<int64_t>(v.sizes[d - 1], 1);
  for (size_t i = d - 2; i-- > 0;) {
    strides[i] = step;
    step *= std::max<int64_t>(v.sizes[i], 1);
  }
  v.strides = std::move(strides);
}

std::mutex g_traits_mu;
std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpTraits>>
    g_traits;

}  // namespace

OpTraits& traitsFor(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  std::lock_guard<std::mutex> g(g_traits_mu);
  auto& slot = g_traits[&schema];
  if (slot) return *slot;
  slot = std::make_unique<OpTraits>();
  OpTraits& t = *slot;
  t.name = schema.operator_name().name;
  t.meta_differs = metaDiffersFromCpu(t.name);
  t.widen_mask = widenedDtypes(op);
  t.call_check = callCheckFor(schema);
  if (t.name == "aten::native_layer_norm")
    t.adjust_meta = &layerNormStatsInInputDtype;
  if (t.name == "aten::multi_margin_loss")
    t.adjust_meta = &multiMarginLossUnreducedShape;
  if (t.name == "aten::multilabel_margin_loss_forward")
    t.adjust_meta = &multilabelMarginLossUnreducedShape;
  if (t.name == "aten::linalg_eig") t.adjust_meta = &eigenvectorsColumnMajor;
  if (!schema.overload_name().empty()) t.name += "." + schema.overload_name();
  const auto& args = schema.arguments();
  for (const auto& a : args) t.arg_is_out.push_back(a.is_out());
  for (size_t i = 0; i < schema.returns().size(); ++i) {
    const auto& r = schema.returns()[i];
    const auto& type = r.type();
    bool tensorish =
        type->kind() == c10::TypeKind::TensorType ||
        (type->kind() == c10::TypeKind::ListType &&
         type->containedType(0)->kind() == c10::TypeKind::TensorType);
    if (!tensorish) t.tensor_returns_only = false;
    const int alias = aliasedArgument(schema, i);
    const bool write = alias >= 0 && r.alias_info()->isWrite();
    t.alias_arg.push_back(alias);
    t.alias_write.push_back(write);
  }
  classifyRandomOp(schema, t);
  t.cpu_kernel_missing =
      !op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU);
  return t;
}

void refuseUnsupportedOp(const OpTraits& traits) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, "Could not run '", traits.name,
      "' with arguments from the 'neuron' backend: the operator is not "
      "supported on neuron (torch_neuronx has no kernel for it, and ATen has "
      "no CPU kernel the simulated NeuronCore could run; ATen may have one "
      "for CUDA only). Use a supported equivalent, or run this op on the CPU "
      "(move its inputs with .cpu() and the result back with .to('neuron')).");
}

void explainSynchronous(OpTraits& traits, const char* why) {
  static const bool on = [] {
    const char* v = std::getenv("TORCH_NEURONX_LOG_SYNC_OPS");
    return v && std::string(v) == "1";
  }();
  if (!on || traits.sync_explained) return;
  traits.sync_explained = true;
  std::fprintf(stderr, "[torch_neuronx] %s runs synchronously: %.300s\n",
               traits.name.c_str(), why);
}

namespace {

const char* pythonLayoutName(c10::Layout layout) {
  switch (layout) {
    case c10::kSparse:
      return "torch.sparse_coo";
    case c10::kSparseCsr:
      return "torch.sparse_csr";
    case c10::kSparseCsc:
      return "torch.sparse_csc";
    case c10::kSparseBsr:
      return "torch.sparse_bsr";
    case c10::kSparseBsc:
      return "torch.sparse_bsc";
    case c10::kMkldnn:
      return "torch._mkldnn";
    case c10::kJagged:
      return "torch.jagged";
    default:
      return "a non-strided layout";
  }
}

}  // namespace

void checkStridedResult(const OpTraits& traits, c10::Layout layout) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      layout == c10::kStrided, traits.name,
      " would return a tensor with layout ", pythonLayoutName(layout),
      " on neuron, but neuron tensors support only the strided (dense) "
      "layout. Sparse, mkldnn and other layouts are not supported on neuron; "
      "convert on the CPU instead (e.g. t.cpu().to_sparse()).");
}

namespace {

// One wording for both refusals, so that users see the same advice.
constexpr char kQuantizedRefusal[] =
    "quantized tensors are not supported on neuron (TorchNeuron lists "
    "quantization, per-channel included, as unsupported). Quantize on the CPU "
    "instead, e.g. q = torch.quantize_per_tensor(t.cpu(), scale, zero_point, "
    "dtype), and move q.dequantize() to neuron for compute.";

}  // namespace

void checkUnquantizedResult(const OpTraits& traits, c10::ScalarType dtype) {
  TORCH_CHECK_NOT_IMPLEMENTED(!c10::isQIntType(dtype), traits.name,
                              " would return a ", c10::toString(dtype),
                              " tensor on neuron, but ", kQuantizedRefusal);
}

void refuseQuantizedOp(const c10::OperatorHandle& op,
                       torch::jit::Stack* /*stack*/) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, traitsFor(op).name,
                              " was called with a quantized tensor or dtype "
                              "for neuron, but ",
                              kQuantizedRefusal);
}

}  // namespace torch_neuronx
