#include "eager/dtype_widening.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "eager/device_check.h"
#include "eager/ivalue_tensors.h"
#include "eager/meta_mirror.h"
#include "eager/schema_aliases.h"

namespace torch_neuronx {
namespace {

using c10::IValue;
using c10::ScalarType;

constexpr uint64_t bit(ScalarType t) {
  return uint64_t{1} << static_cast<int>(t);
}
constexpr uint64_t kHalfTypes =
    bit(ScalarType::Half) | bit(ScalarType::BFloat16);

// Ops whose CPU kernel lacks dtypes CUDA's kernel takes (besides complex32,
// which every computing op widens). `overload`: only that overload (and its
// in-place / out= forms), or nullptr for all.
struct Rule {
  const char* op;  // without "aten::"
  const char* overload;
  uint64_t dtypes;
};
constexpr Rule kRules[] = {
    // Pooling, upsampling and losses CUDA instantiates for the half types.
    {"avg_pool3d", nullptr, kHalfTypes},
    {"avg_pool3d_backward", nullptr, kHalfTypes},
    {"_upsample_bilinear2d_aa", nullptr, kHalfTypes},
    {"_upsample_bilinear2d_aa_backward", nullptr, kHalfTypes},
    {"multi_margin_loss", nullptr, kHalfTypes},
    {"multi_margin_loss_backward", nullptr, kHalfTypes},
    {"multilabel_margin_loss_forward", nullptr, kHalfTypes},
    {"multilabel_margin_loss_backward", nullptr, kHalfTypes},
    {"rrelu_with_noise", nullptr, kHalfTypes},
    {"rrelu_with_noise_", nullptr, kHalfTypes},
    {"rrelu_with_noise_backward", nullptr, kHalfTypes},
    {"round", "decimals", kHalfTypes},
    {"round_", "decimals", kHalfTypes},
    {"polygamma", nullptr, kHalfTypes},
    {"polygamma_", nullptr, kHalfTypes},
    // cuFFT takes half (CUDA: power-of-two sizes only; here any size).
    {"_fft_r2c", nullptr, kHalfTypes},
    {"_fft_c2r", nullptr, kHalfTypes},
    {"_fft_c2c", nullptr, kHalfTypes},
    // Bool inputs CUDA's kernels accept.
    {"abs", nullptr, bit(ScalarType::Bool)},
    {"abs_", nullptr, bit(ScalarType::Bool)},
    {"trace", nullptr, bit(ScalarType::Bool)},
};

// Ops that only move or reinterpret data: the CPU handles every dtype there,
// and widening would only cost a copy (or break a view).
bool movesDataOnly(const std::string& base) {
  static const char* const kOps[] = {"copy_",
                                     "_copy_from",
                                     "_copy_from_and_resize",
                                     "_to_copy",
                                     "clone",
                                     "fill_",
                                     "zero_",
                                     "empty_like",
                                     "resize_",
                                     "set_",
                                     "_local_scalar_dense",
                                     "_conj_physical",
                                     "detach",
                                     "alias",
                                     "lift_fresh",
                                     "_resize_output_"};
  for (const char* op : kOps)
    if (base == op) return true;
  return false;
}

ScalarType wider(ScalarType t, const std::string& base) {
  switch (t) {
    case ScalarType::Half:
    case ScalarType::BFloat16:
      return ScalarType::Float;
    case ScalarType::ComplexHalf:
      return ScalarType::ComplexFloat;
    case ScalarType::Bool:
      // trace sums (bool sums to int64); abs keeps the dtype: 0/1 as bytes.
      return base == "trace" ? ScalarType::Long : ScalarType::Byte;
    default:
      return t;
  }
}

// The dtypes the op returns for the caller's inputs, per return and tensor
// (its Meta kernel on mirrors); empty if the Meta kernel cannot tell.
std::vector<std::vector<ScalarType>> returnDtypes(
    const c10::OperatorHandle& op, const std::vector<IValue>& args) {
  std::vector<std::vector<ScalarType>> out;
  MetaMirror mirror;
  torch::jit::Stack meta;
  meta.reserve(args.size());
  for (const IValue& v : args)
    meta.push_back(mapDevice(mapTensors(v, mirror), c10::Device(c10::kMeta)));
  try {
    op.callBoxed(meta);
  } catch (...) {
    return {};
  }
  for (const IValue& r : meta) {
    std::vector<ScalarType> d;
    forEachTensor(r, [&](const at::Tensor& t) {
      d.push_back(t.defined() ? t.scalar_type() : ScalarType::Undefined);
    });
    out.push_back(std::move(d));
  }
  return out;
}

bool returnsView(const c10::FunctionSchema& schema) {
  for (const auto& r : schema.returns())
    if (r.alias_info() && !r.alias_info()->isWrite()) return true;
  return false;
}

}  // namespace

uint64_t widenedDtypes(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  const std::string name = schema.operator_name().name;
  if (name.rfind("aten::", 0) != 0) return 0;
  const std::string base = name.substr(6);
  if (movesDataOnly(base) || returnsView(schema)) return 0;
  const std::string& overload = schema.overload_name();
  uint64_t mask = bit(ScalarType::ComplexHalf);
  for (const Rule& r : kRules) {
    if (base != r.op) continue;
    // "decimals" also covers "decimals_out".
    if (r.overload && overload.rfind(r.overload, 0) != 0) continue;
    mask |= r.dtypes;
  }
  return mask;
}

c10::OperatorHandle operatorNamed(const char* name) {
  const char* dot = std::strchr(name, '.');
  std::string base = dot ? std::string(name, dot) : std::string(name);
  return c10::Dispatcher::singleton().findSchemaOrThrow(base.c_str(),
                                                        dot ? dot + 1 : "");
}

void runWidened(const c10::OperatorHandle& op, uint64_t mask,
                torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const std::string base = schema.operator_name().name.substr(6);
  const size_t nargs = schema.arguments().size();
  std::vector<IValue> args(stack->end() - static_cast<std::ptrdiff_t>(nargs),
                           stack->end());
  const auto narrow = returnDtypes(op, args);
  // complex32 pairs with float16 (complex(real, imag), polar, view_as_real's
  // inverse): widened together, they stay a matching pair.
  for (const IValue& v : args)
    forEachTensor(v, [&](const at::Tensor& t) {
      if (t.defined() && t.scalar_type() == ScalarType::ComplexHalf &&
          needsWidening(mask, t))
        mask |= bit(ScalarType::Half);
    });

  // The caller's tensors the op writes, with the wide tensors it writes to.
  std::vector<std::pair<at::Tensor, at::Tensor>> written;
  // Wide dtype -> the caller's dtype, for results the Meta kernel did not
  // describe.
  std::vector<std::pair<ScalarType, ScalarType>> back;
  torch::jit::Stack wide;
  wide.reserve(nargs);
  for (size_t i = 0; i < nargs; ++i) {
    const auto& arg = schema.arguments()[i];
    const bool writes = arg.alias_info() && arg.alias_info()->isWrite();
    wide.push_back(mapTensors(args[i], [&](const at::Tensor& t) -> at::Tensor {
      if (!needsWidening(mask, t)) return t;
      const ScalarType w = wider(t.scalar_type(), base);
      back.emplace_back(w, t.scalar_type());
      at::Tensor wt = t.to(w);
      if (writes) written.emplace_back(t, wt);
      return wt;
    }));
  }
  op.callBoxed(wide);

  for (auto& [mine, w] : written) {
    if (mine.sizes() != w.sizes()) mine.resize_(w.sizes());
    mine.copy_(w);
  }
  auto narrowed = [&](const at::Tensor& r, ScalarType want) -> at::Tensor {
    if (!r.defined()) return r;
    if (want == ScalarType::Undefined) {
      want = r.scalar_type();
      for (auto [w, n] : back)
        if (w == want) {
          want = n;
          break;
        }
    }
    return r.scalar_type() == want ? r : r.to(want);
  };
  const size_t nret = schema.returns().size();
  std::vector<IValue> outs;
  outs.reserve(nret);
  for (size_t i = 0; i < nret; ++i) {
    const int a = aliasedArgument(schema, i);
    if (a >= 0 && schema.returns()[i].alias_info()->isWrite()) {
      outs.push_back(args[a]);
      continue;
    }
    size_t k = 0;
    outs.push_back(mapTensors(wide[i], [&](const at::Tensor& r) {
      ScalarType want = ScalarType::Undefined;
      if (i < narrow.size() && k < narrow[i].size()) want = narrow[i][k];
      ++k;
      return narrowed(r, want);
    }));
  }
  torch::jit::drop(*stack, nargs);
  for (auto& o : outs) stack->push_back(std::move(o));
}

}  // namespace torch_neuronx
