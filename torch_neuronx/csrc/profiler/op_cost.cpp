#include "profiler/op_cost.h"

#include <c10/util/ArrayRef.h>

#include <algorithm>
#include <cstring>

#include "eager/cpu_alias.h"

namespace torch_neuronx::profiler {
namespace {

double numel(c10::IntArrayRef sizes) {
  double n = 1;
  for (int64_t s : sizes) n *= static_cast<double>(s);
  return n;
}

// `name` is `op` or one of its overloads ("aten::mm" matches "aten::mm.out").
bool nameIs(const char* name, const char* op) {
  const size_t n = std::strlen(op);
  return std::strncmp(name, op, n) == 0 && (name[n] == '\0' || name[n] == '.');
}

// Flops of a matrix product from its two operands (the last two dims of
// each; leading dims are a batch).
double productFlops(c10::IntArrayRef a, c10::IntArrayRef b) {
  if (a.size() < 2 || b.size() < 2) return 0;
  const double m = static_cast<double>(a[a.size() - 2]);
  const double k = static_cast<double>(a[a.size() - 1]);
  const double n = static_cast<double>(b[b.size() - 1]);
  double batch = 1;
  for (size_t i = 0; i + 2 < a.size(); ++i) batch *= static_cast<double>(a[i]);
  return 2 * batch * m * k * n;
}

// The tensor-engine flops of `name` over `plan`'s tensors, or -1 when the op
// does not run on the tensor engine.
double tensorEngineFlops(const char* name, const AliasPlan& plan) {
  const int n = plan.count();
  auto sizes = [&](int i) { return plan.sizesOf(i); };
  if (nameIs(name, "aten::mm") || nameIs(name, "aten::bmm") ||
      nameIs(name, "aten::matmul") || nameIs(name, "aten::dot") ||
      nameIs(name, "aten::mv")) {
    if (n < 2) return -1;
    if (sizes(1).size() == 1)  // dot, mv: one multiply-add per element of self
      return 2 * numel(sizes(0));
    return productFlops(sizes(0), sizes(1));
  }
  if (nameIs(name, "aten::addmm") || nameIs(name, "aten::baddbmm") ||
      nameIs(name, "aten::addbmm") || nameIs(name, "aten::addmv")) {
    if (n < 3) return -1;
    return productFlops(sizes(1), sizes(2));
  }
  if (std::strstr(name, "convolution") != nullptr) {
    // input, weight[, bias], ..., output (the last recorded tensor): each
    // output element takes Cin/groups x kernel multiply-adds.
    if (n < 3) return -1;
    c10::IntArrayRef w = sizes(1);
    c10::IntArrayRef out = sizes(n - 1);
    if (w.size() < 3 || out.empty()) return -1;
    double per_output = 1;
    for (size_t i = 1; i < w.size(); ++i)
      per_output *= static_cast<double>(w[i]);
    return 2 * numel(out) * per_output;
  }
  if (std::strstr(name, "scaled_dot_product") != nullptr) {
    // q [.., L, E], k [.., S, E], v [.., S, Ev]: Q K^T, then P V.
    if (n < 3 || sizes(0).size() < 2 || sizes(1).size() < 2 ||
        sizes(2).size() < 2)
      return -1;
    c10::IntArrayRef q = sizes(0), k = sizes(1), v = sizes(2);
    const double L = static_cast<double>(q[q.size() - 2]);
    const double E = static_cast<double>(q[q.size() - 1]);
    const double S = static_cast<double>(k[k.size() - 2]);
    const double Ev = static_cast<double>(v[v.size() - 1]);
    double batch = 1;
    for (size_t i = 0; i + 2 < q.size(); ++i)
      batch *= static_cast<double>(q[i]);
    return 2 * batch * L * S * (E + Ev);
  }
  return -1;
}

}  // namespace

void noteEagerItem(const char* name, const AliasPlan& plan) {
  neuron_rt::ItemNote& note = neuron_rt::pendingNote();
  double bytes = 0;
  double largest = 0;
  int element_bytes = 0;
  for (int i = 0; i < plan.count(); ++i) {
    const int64_t item = plan.itemsizeOf(i);
    if (item == 0) continue;
    const double n = numel(plan.sizesOf(i));
    bytes += n * static_cast<double>(item);
    largest = std::max(largest, n);
    if (element_bytes == 0) element_bytes = static_cast<int>(item);
  }
  const double tensor_flops = tensorEngineFlops(name, plan);
  note.set = true;
  note.category = neuron_rt::ItemCategory::kCompute;
  note.bytes = bytes;
  note.tensor_engine = tensor_flops >= 0;
  note.flops = tensor_flops >= 0 ? tensor_flops : largest;
  note.element_bytes = element_bytes ? element_bytes : 4;
}

void noteCopyItem(int64_t bytes) {
  neuron_rt::ItemNote& note = neuron_rt::pendingNote();
  note.set = true;
  note.category = neuron_rt::ItemCategory::kCopy;
  note.bytes = static_cast<double>(bytes);
}

}  // namespace torch_neuronx::profiler
