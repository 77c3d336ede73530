#include "profiler/op_cost.h"

#include <c10/util/SmallVector.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "eager/alias_plan.h"
#include "eager/host_fallback_ops.h"
#include "profiler/device_timeline.h"

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

// A matrix product from its two operands (the last two dims of each;
// leading dims of the first are a batch).
neuron_rt::MatmulShape productShape(c10::IntArrayRef a, c10::IntArrayRef b) {
  neuron_rt::MatmulShape s;
  s.m = static_cast<double>(a[a.size() - 2]);
  s.k = static_cast<double>(a[a.size() - 1]);
  s.n = static_cast<double>(b[b.size() - 1]);
  for (size_t i = 0; i + 2 < a.size(); ++i)
    s.batch *= static_cast<double>(a[i]);
  return s;
}

double flopsOf(const neuron_rt::MatmulShape& s) {
  return 2 * s.batch * s.m * s.k * s.n;
}

// The tensor-engine matmuls of `name` over its tensors; false when the op
// does not run on the tensor engine.
bool tensorEngineMatmuls(const char* name, c10::ArrayRef<OpTensor> t,
                         std::vector<neuron_rt::MatmulShape>& out) {
  const int n = static_cast<int>(t.size());
  auto sizes = [&](int i) {
    return t[i].itemsize > 0 ? t[i].sizes : c10::IntArrayRef();
  };
  if (nameIs(name, "aten::mm") || nameIs(name, "aten::bmm") ||
      nameIs(name, "aten::matmul") || nameIs(name, "aten::dot") ||
      nameIs(name, "aten::mv")) {
    if (n < 2) return false;
    if (sizes(1).size() == 1) {
      // dot: (1 x k) @ (k x 1); mv: (m x k) @ (k x 1).
      c10::IntArrayRef a = sizes(0);
      neuron_rt::MatmulShape s;
      if (a.size() == 1) {
        s.m = 1;
        s.k = static_cast<double>(a[0]);
      } else if (a.size() >= 2) {
        s.m = static_cast<double>(a[a.size() - 2]);
        s.k = static_cast<double>(a[a.size() - 1]);
        for (size_t i = 0; i + 2 < a.size(); ++i)
          s.batch *= static_cast<double>(a[i]);
      }
      s.n = 1;
      out.push_back(s);
      return true;
    }
    if (sizes(0).size() < 2 || sizes(1).size() < 2) return true;
    out.push_back(productShape(sizes(0), sizes(1)));
    return true;
  }
  if (nameIs(name, "aten::addmm") || nameIs(name, "aten::baddbmm") ||
      nameIs(name, "aten::addbmm") || nameIs(name, "aten::addmv")) {
    if (n < 3) return false;
    if (sizes(2).size() == 1) {  // addmv: (m x k) @ (k x 1)
      c10::IntArrayRef a = sizes(1);
      if (a.size() < 2) return true;
      neuron_rt::MatmulShape s;
      s.m = static_cast<double>(a[a.size() - 2]);
      s.k = static_cast<double>(a[a.size() - 1]);
      s.n = 1;
      out.push_back(s);
      return true;
    }
    if (sizes(1).size() < 2 || sizes(2).size() < 2) return true;
    out.push_back(productShape(sizes(1), sizes(2)));
    return true;
  }
  if (std::strstr(name, "convolution") != nullptr) {
    // input, weight[, bias], ..., output (the last recorded tensor): an
    // implicit GEMM, each output element taking Cin/groups x kernel
    // multiply-adds: m = the output's positions (batch x spatial), k =
    // Cin/groups x kernel, n = Cout.
    if (n < 3) return false;
    c10::IntArrayRef w = sizes(1);
    c10::IntArrayRef o = sizes(n - 1);
    if (w.size() < 3 || o.size() < 2) return false;
    neuron_rt::MatmulShape s;
    s.n = static_cast<double>(w[0]);
    s.k = 1;
    for (size_t i = 1; i < w.size(); ++i) s.k *= static_cast<double>(w[i]);
    s.m = s.n > 0 ? numel(o) / s.n : 0;
    out.push_back(s);
    return true;
  }
  if (std::strstr(name, "scaled_dot_product") != nullptr) {
    // Forward: q [.., L, E], k [.., S, E], v [.., S, Ev]: Q K^T, then P V.
    // Backward: grad_out first, then q, k, v; it recomputes P = Q K^T and
    // takes dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q: five products
    // (FlashAttention's 2.5x the forward), not the forward's two.
    const bool backward = std::strstr(name, "backward") != nullptr;
    const int first = backward ? 1 : 0;
    if (n < first + 3 || sizes(first).size() < 2 ||
        sizes(first + 1).size() < 2 || sizes(first + 2).size() < 2)
      return false;
    c10::IntArrayRef q = sizes(first), k = sizes(first + 1),
                     v = sizes(first + 2);
    neuron_rt::MatmulShape qk, pv;
    for (size_t i = 0; i + 2 < q.size(); ++i)
      qk.batch *= static_cast<double>(q[i]);
    pv.batch = qk.batch;
    qk.m = pv.m = static_cast<double>(q[q.size() - 2]);  // L
    qk.k = static_cast<double>(q[q.size() - 1]);         // E
    qk.n = pv.k = static_cast<double>(k[k.size() - 2]);  // S
    pv.n = static_cast<double>(v[v.size() - 1]);         // Ev
    out.push_back(qk);
    out.push_back(pv);
    if (backward) {
      // dP = dO V^T [L, Ev] x [Ev, S]; dQ = dS K [L, S] x [S, E];
      // dK = dS^T Q [S, L] x [L, E] (dV = P^T dO has pv's shape, transposed).
      neuron_rt::MatmulShape dp, dq, dk, dv;
      dp.batch = dq.batch = dk.batch = dv.batch = qk.batch;
      dp.m = qk.m, dp.k = pv.n, dp.n = qk.n;
      dq.m = qk.m, dq.k = qk.n, dq.n = qk.k;
      dk.m = qk.n, dk.k = qk.m, dk.n = qk.k;
      dv.m = qk.n, dv.k = qk.m, dv.n = pv.n;
      out.back() = dv;  // the backward has no P V; dV takes its place
      out.push_back(dp);
      out.push_back(dq);
      out.push_back(dk);
    }
    return true;
  }
  return false;
}

}  // namespace

bool isCopyItem(const char* name) {
  for (const char* copy :
       {"aten::copy_", "copy_host_to_device", "copy_device_to_host",
        "copy_device_to_device", "aten::_local_scalar_dense"})
    if (std::strcmp(name, copy) == 0) return true;
  return false;
}

neuron_rt::ItemWork eagerOpWork(const char* name,
                                c10::ArrayRef<OpTensor> tensors) {
  if (isCopyItem(name)) {
    double bytes = 0;
    for (const OpTensor& t : tensors)
      if (t.itemsize > 0)
        bytes += numel(t.sizes) * static_cast<double>(t.itemsize);
    return copyWork(static_cast<int64_t>(bytes));
  }
  neuron_rt::ItemWork w;
  double largest = 0;
  int element_bytes = 0;
  for (const OpTensor& t : tensors) {
    if (t.itemsize <= 0) continue;
    const double n = numel(t.sizes);
    const double b = n * static_cast<double>(t.itemsize);
    w.bytes += b;
    if (b > 0)
      w.transfers.push_back(
          neuron_rt::Transfer{b, 0, static_cast<double>(t.itemsize)});
    largest = std::max(largest, n);
    if (element_bytes == 0) element_bytes = static_cast<int>(t.itemsize);
  }
  w.tensor_engine = tensorEngineMatmuls(name, tensors, w.matmuls);
  if (w.tensor_engine) {
    for (const auto& s : w.matmuls) w.flops += flopsOf(s);
  } else {
    w.flops = largest;
  }
  w.element_bytes = element_bytes ? element_bytes : 4;
  w.launch = true;
  return w;
}

neuron_rt::ItemWork eagerOpWork(const char* name, const AliasPlan& plan) {
  c10::SmallVector<OpTensor, 8> tensors;
  tensors.reserve(plan.count());
  for (int i = 0; i < plan.count(); ++i) {
    const int64_t item = plan.itemsizeOf(i);
    tensors.push_back(
        OpTensor{item > 0 ? plan.sizesOf(i) : c10::IntArrayRef(), item});
  }
  return eagerOpWork(name, tensors);
}

neuron_rt::EstimateParts hostFallbackParts(c10::ArrayRef<OpTensor> tensors,
                                           const neuron_rt::TrainiumModel& m) {
  double bytes = 0;
  for (const OpTensor& t : tensors)
    if (t.itemsize > 0)
      bytes += numel(t.sizes) * static_cast<double>(t.itemsize);
  // The operands out and the results back: one transfer of all the bytes and
  // a DMA start each way; the device waiting for the host: one launch.
  neuron_rt::EstimateParts p =
      neuron_rt::estimateItem(copyWork(static_cast<int64_t>(bytes)), m);
  p.latency_ns += m.dma_start_ns + m.launch_ns;
  return p;
}

void noteEagerItem(const char* name, const AliasPlan& plan) {
  neuron_rt::ItemNote& note = neuron_rt::pendingNote();
  if (isHostFallbackOp(name)) {
    c10::SmallVector<OpTensor, 8> tensors;
    for (int i = 0; i < plan.count(); ++i) {
      const int64_t item = plan.itemsizeOf(i);
      tensors.push_back(
          OpTensor{item > 0 ? plan.sizesOf(i) : c10::IntArrayRef(), item});
    }
    note.set = true;
    note.category = neuron_rt::ItemCategory::kCompute;
    note.bytes = eagerOpWork(name, tensors).bytes;
    note.parts = hostFallbackParts(tensors, deviceModel());
    note.has_parts = true;
    note.host_compute = true;  // + the item's own run time (stream.cpp)
    note.estimate_ns = neuron_rt::roundedNs(note.parts);
    static const auto kDetail =
        std::make_shared<const std::string>("fallback=host");
    note.detail = kDetail;
    return;
  }
  const neuron_rt::ItemWork w = eagerOpWork(name, plan);
  note.set = true;
  note.category = neuron_rt::ItemCategory::kCompute;
  note.bytes = w.bytes;
  note.tensor_engine = w.tensor_engine;
  note.flops = w.flops;
  note.element_bytes = w.element_bytes;
  note.parts = neuron_rt::estimateItem(w, deviceModel());
  note.has_parts = true;
  note.estimate_ns = neuron_rt::roundedNs(note.parts);
}

void noteCopyItem(int64_t bytes) {
  neuron_rt::ItemNote& note = neuron_rt::pendingNote();
  note.set = true;
  note.category = neuron_rt::ItemCategory::kCopy;
  note.bytes = static_cast<double>(bytes);
  note.parts = neuron_rt::estimateItem(copyWork(bytes), deviceModel());
  note.has_parts = true;
  note.estimate_ns = neuron_rt::roundedNs(note.parts);
}

neuron_rt::ItemWork copyWork(int64_t bytes) {
  neuron_rt::ItemWork w;
  w.bytes = static_cast<double>(bytes);
  w.transfers.push_back(neuron_rt::Transfer{w.bytes, 0});
  w.launch = false;  // a DMA queued as it is, no op to launch
  return w;
}

}  // namespace torch_neuronx::profiler
