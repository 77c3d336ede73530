#include "eager/call_checks.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Dispatch_v2.h>
#include <ATen/MemoryOverlap.h>

#include <limits>
#include <string>
#include <unordered_map>

namespace torch_neuronx {
namespace {

using c10::IValue;

// uniform_(from, to): the bounds the CPU and CUDA kernels check before
// drawing, with their messages.
void checkUniformBounds(const std::vector<IValue>& args) {
  const at::Tensor& self = args[0].toTensor();
  const double from = args[1].toDouble();
  const double to = args[2].toDouble();
  const auto t = self.scalar_type();
  if (!(at::isFloatingType(t) && (t == at::kFloat || t == at::kDouble ||
                                  t == at::kHalf || t == at::kBFloat16)))
    return;  // other dtypes: the first call's validation decides
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t, "uniform_", [&] {
    const double lowest =
        static_cast<double>(std::numeric_limits<scalar_t>::lowest());
    const double max =
        static_cast<double>(std::numeric_limits<scalar_t>::max());
    TORCH_CHECK(from >= lowest && from <= max, "from is out of bounds for ",
                self.dtype());
    TORCH_CHECK(to >= lowest && to <= max, "to is out of bounds for ",
                self.dtype());
    TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, ",
                "but found from=", from, " > to=", to);
    TORCH_CHECK(
        to - from <= max, "uniform_ expects to-from <= std::numeric_limits<",
        c10::toString(t), ">::max(), but found to=", to, " and from=", from,
        " which result in to-from to exceed the limit");
  });
}

// bernoulli_(p) / bernoulli(p): a probability.
void checkBernoulliProbability(const std::vector<IValue>& args) {
  const double p = args[1].toDouble();
  TORCH_CHECK(0 <= p && p <= 1,
              "bernoulli_ expects p to be in [0, 1], but got p=", p);
}

// A Scalar written into a tensor must fit its dtype (the kernels convert
// with an overflow check).
void checkValueFits(const at::Tensor& self, const c10::Scalar& value) {
  const auto t = self.scalar_type();
  const bool standard = at::isIntegralType(t, /*includeBool=*/true) ||
                        t == at::kFloat || t == at::kDouble || t == at::kHalf ||
                        t == at::kBFloat16 || at::isComplexType(t);
  if (!standard) return;
  AT_DISPATCH_V2(t, "fill", AT_WRAP([&] { (void)value.to<scalar_t>(); }),
                 AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kBool, at::kHalf,
                 at::kBFloat16, at::kComplexHalf,
                 AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
}

template <int kValueArg>
void checkScalarFits(const std::vector<IValue>& args) {
  checkValueFits(args[0].toTensor(), args[kValueArg].toScalar());
}

// multinomial: the limits that depend on the number of categories (the
// dtype, rank and count checks are the first call's validation).
void checkMultinomialCategories(const std::vector<IValue>& args) {
  const at::Tensor& self = args[0].toTensor();
  const int64_t n_sample = args[1].toInt();
  const bool replacement = args[2].toBool();
  if (self.dim() < 1 || self.dim() > 2 ||
      !at::isFloatingType(self.scalar_type()) || n_sample <= 0)
    return;
  const int64_t categories = self.size(-1);
  TORCH_CHECK(replacement || n_sample <= categories,
              "cannot sample n_sample > prob_dist.size(-1) samples without "
              "replacement");
  TORCH_CHECK(categories <= (int64_t{1} << 24),
              "number of categories cannot exceed 2^24");
}

// out= ops whose kernel checks the output for overlap before resizing it:
// the Meta kernel resizes it first, after which it no longer overlaps.
template <int kIn0, int kIn1>
void checkOutOverlap(const std::vector<IValue>& args) {
  const at::Tensor& out = args.back().toTensor();
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, args[kIn0].toTensor());
  at::assert_no_overlap(out, args[kIn1].toTensor());
}

const std::unordered_map<std::string, CallCheck>& checks() {
  static const std::unordered_map<std::string, CallCheck> table = {
      {"aten::uniform_", &checkUniformBounds},
      {"aten::bernoulli_.float", &checkBernoulliProbability},
      {"aten::bernoulli.p", &checkBernoulliProbability},
      {"aten::fill_.Scalar", &checkScalarFits<1>},
      {"aten::masked_fill.Scalar", &checkScalarFits<2>},
      {"aten::masked_fill_.Scalar", &checkScalarFits<2>},
      {"aten::masked_fill.Scalar_out", &checkScalarFits<2>},
      {"aten::index_fill.int_Scalar", &checkScalarFits<3>},
      {"aten::index_fill_.int_Scalar", &checkScalarFits<3>},
      {"aten::multinomial", &checkMultinomialCategories},
      {"aten::multinomial.out", &checkMultinomialCategories},
      // index_select.out(self, dim, index, out)
      {"aten::index_select.out", &checkOutOverlap<0, 2>},
      // masked_select.out(self, mask, out): runs synchronously into a fresh
      // CPU tensor, so its kernel never sees `out`.
      {"aten::masked_select.out", &checkOutOverlap<0, 1>},
  };
  return table;
}

}  // namespace

CallCheck callCheckFor(const c10::FunctionSchema& schema) {
  std::string name = schema.name();
  if (!schema.overload_name().empty()) name += "." + schema.overload_name();
  auto it = checks().find(name);
  return it == checks().end() ? nullptr : it->second;
}

}  // namespace torch_neuronx
