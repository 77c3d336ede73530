#include "adaptive/fusion_plan.h"

#include <ATen/Parallel.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <mutex>
#include <numeric>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "core/compute_pool.h"
#include "eager/op_item.h"

namespace torch_neuronx::adaptive {
namespace {

// ATen's default grain for elementwise loops (at::internal::GRAIN_SIZE).
constexpr int64_t kDefaultGrain = 32768;

// How an elementwise op's CPU kernel splits its loop over threads.
enum class Grain : uint8_t {
  kNone,     // not an elementwise op the pass runs in tiles
  kDefault,  // TensorIterator's for_each with the default grain
  kGelu,     // GELU's kernel: N / threads above 6144 elements
};

// Elementwise ops whose CPU kernels are TensorIterator loops over their
// output (one output, inputs broadcast to it), by base name: "aten::add_"
// "aten::add.Tensor" and "aten::add.out" are all "add".
Grain grainOfBase(const std::string& base) {
  static const std::unordered_set<std::string> kElementwise = {
      "add",
      "sub",
      "mul",
      "div",
      "neg",
      "sqrt",
      "rsqrt",
      "exp",
      "exp2",
      "expm1",
      "tanh",
      "sigmoid",
      "silu",
      "lerp",
      "addcmul",
      "addcdiv",
      "threshold",
      "clamp",
      "clamp_min",
      "clamp_max",
      "leaky_relu",
      "hardsigmoid",
      "gelu_backward",
      "silu_backward",
      "tanh_backward",
      "sigmoid_backward",
      "threshold_backward",
      "leaky_relu_backward",
      "maximum",
      "minimum",
      "masked_fill",
      "copy"};
  if (base == "gelu") return Grain::kGelu;
  return kElementwise.count(base) ? Grain::kDefault : Grain::kNone;
}

// "aten::add_.Tensor" -> "add".
std::string baseName(const char* op) {
  std::string s(op);
  if (s.rfind("aten::", 0) == 0) s = s.substr(6);
  if (auto dot = s.find('.'); dot != std::string::npos) s.resize(dot);
  if (!s.empty() && s.back() == '_') s.pop_back();
  return s;
}

Grain grainOf(const char* op) {
  static std::mutex mu;
  static std::unordered_map<const char*, Grain> known;  // names live forever
  std::lock_guard<std::mutex> g(mu);
  auto it = known.find(op);
  if (it != known.end()) return it->second;
  return known[op] = grainOfBase(baseName(op));
}

int64_t grainValue(Grain g, int64_t n, int threads) {
  if (g == Grain::kGelu && n > 6144) return std::max<int64_t>(n / threads, 1);
  return kDefaultGrain;
}

bool contiguous(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  int64_t expected = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

bool plainDtype(caffe2::TypeMeta t) {
  const auto s = t.toScalarType();
  return !c10::isComplexType(s) && !c10::isQIntType(s) &&
         s != at::kFloat8_e4m3fn && s != at::kFloat8_e5m2;
}

// Operand i of `plan` seen from an output of `out_sizes`: kRow with its
// row length in `row`, or false when it fits no mapping.
bool mapOperand(const AliasPlan& plan, int i, c10::IntArrayRef out_sizes,
                int64_t n, Mapping& m, int64_t& row) {
  const int storage = plan.storageOf(i);
  if (storage == -1) {
    m = Mapping::kScalar;
    return true;
  }
  if (storage == -2) {  // a host scalar, handed over as it is
    m = Mapping::kScalar;
    return plan.keptOf(i).numel() == 1;
  }
  if (!plainDtype(plan.dtypeOf(i))) return false;
  const auto sizes = plan.sizesOf(i);
  const int64_t numel = c10::multiply_integers(sizes);
  if (numel == 1) {
    m = Mapping::kScalar;
    return true;
  }
  if (!contiguous(sizes, plan.stridesOf(i))) return false;
  // Its sizes, leading 1s dropped, must be the output's trailing sizes.
  size_t lead = 0;
  while (lead < sizes.size() && sizes[lead] == 1) ++lead;
  const size_t dims = sizes.size() - lead;
  if (dims > out_sizes.size()) return false;
  for (size_t d = 0; d < dims; ++d)
    if (sizes[lead + d] != out_sizes[out_sizes.size() - dims + d]) return false;
  if (numel == n) {
    m = Mapping::kFull;
    return true;
  }
  m = Mapping::kRow;
  row = numel;
  return true;
}

// An elementwise op of the pass: its operands' mappings and inner length.
bool mapElementwise(OpItem& item, FusedOp& op, int64_t& n) {
  const AliasPlan& plan = item.operands();
  int written = -1;
  for (int i = 0; i < plan.count(); ++i) {
    if (!item.writes(i)) continue;
    if (written >= 0) return false;  // one output only
    written = i;
  }
  if (written < 0 || plan.storageOf(written) < 0) return false;
  const auto out_sizes = plan.sizesOf(written);
  n = c10::multiply_integers(out_sizes);
  if (n == 0 || !contiguous(out_sizes, plan.stridesOf(written)) ||
      !plainDtype(plan.dtypeOf(written)))
    return false;
  op.maps.resize(plan.count());
  op.inner = n;
  int64_t row = 0;
  for (int i = 0; i < plan.count(); ++i) {
    int64_t r = 0;
    if (!mapOperand(plan, i, out_sizes, n, op.maps[i], r)) return false;
    if (op.maps[i] == Mapping::kRow) {
      if (item.writes(i) || (row && r != row)) return false;
      row = r;
    }
  }
  if (op.maps[written] != Mapping::kFull) return false;
  if (row) op.inner = row;
  return true;
}

// An op computing rows of rowLength() on their own (LayerNorm's forward: x,
// gamma, beta, out, mean, rstd; softmax: self, out): its operands are the
// full input and outputs, a row (LayerNorm's weight), or one per row.
bool mapRowwise(OpItem& item, FusedOp& op, int64_t& n) {
  const AliasPlan& plan = item.operands();
  const int64_t row = item.rowLength();
  if (plan.count() == 0 || row <= 0 || plan.storageOf(0) < 0) return false;
  n = c10::multiply_integers(plan.sizesOf(0));
  if (n == 0 || n % row != 0 || n == row) return false;
  op.maps.assign(plan.count(), Mapping::kScalar);
  for (int i = 0; i < plan.count(); ++i) {
    const int s = plan.storageOf(i);
    if (s == -1) continue;  // no weight or bias
    if (s < 0 || !plainDtype(plan.dtypeOf(i)) ||
        !contiguous(plan.sizesOf(i), plan.stridesOf(i)))
      return false;
    const int64_t numel = c10::multiply_integers(plan.sizesOf(i));
    if (numel == n)
      op.maps[i] = Mapping::kFull;
    else if (numel == row && !item.writes(i))
      op.maps[i] = Mapping::kRow;
    else if (numel == n / row && item.writes(i))
      op.maps[i] = Mapping::kPerRow;
    else
      return false;
  }
  op.inner = row;
  op.rank = static_cast<int>(plan.sizesOf(0).size());
  op.rowwise = true;
  return true;
}

// One stretch of device memory an op touches.
struct Access {
  const char* lo;
  const char* hi;
  Mapping map;
  int64_t itemsize;
  bool written;
  int operand;
};

void accessesOf(const FusedOp& op, int64_t n, std::vector<Access>& out) {
  const AliasPlan& plan = op.item->operands();
  for (int i = 0; i < plan.count(); ++i) {
    if (plan.storageOf(i) < 0) continue;
    const MemorySpan m = operandSpan(op, i, n);
    out.push_back(Access{m.lo, m.hi, op.maps[i], plan.itemsizeOf(i),
                         op.item->writes(i), i});
  }
}

// Whether two accesses may go tile by tile in either order of their ops:
// disjoint, both only read, or the same elements at the same addresses.
bool compatible(const Access& a, const Access& b) {
  if (a.hi <= b.lo || b.hi <= a.lo) return true;
  if (!a.written && !b.written) return true;
  return a.map == Mapping::kFull && b.map == Mapping::kFull && a.lo == b.lo &&
         a.itemsize == b.itemsize;
}

bool overlaps(const Access& a, const Access& b) {
  return a.lo < b.hi && b.lo < a.hi;
}

bool compatibleWith(const std::vector<Access>& mine,
                    const std::vector<Access>& others) {
  for (const Access& a : mine)
    for (const Access& b : others)
      if (!compatible(a, b)) return false;
  return true;
}

// An op's own tensors: every pair.
bool selfCompatible(const std::vector<Access>& mine) {
  for (size_t a = 0; a < mine.size(); ++a)
    for (size_t b = a + 1; b < mine.size(); ++b)
      if (!compatible(mine[a], mine[b])) return false;
  return true;
}

// LayerNorm's mean and rstd (written, kPerRow): deferred when they overlap
// memory the group used before, provided they overlap none of the op's own
// other tensors. Removes them from `mine` (they are written after the pass).
bool deferStatistics(FusedOp& op, std::vector<Access>& mine,
                     const std::vector<Access>& touched) {
  std::vector<Access> rest;
  for (const Access& a : mine) {
    if (!(a.written && a.map == Mapping::kPerRow)) {
      rest.push_back(a);
      continue;
    }
    bool clash = false;
    for (const Access& b : touched) clash |= !compatible(a, b);
    if (!clash) {
      rest.push_back(a);
      continue;
    }
    for (const Access& b : mine)
      if (&b != &a && overlaps(a, b)) return false;
    op.places[a.operand] = Placement::kDeferred;
  }
  mine = std::move(rest);
  return true;
}

// Steps after `from` in `work`: the memory their eager ops touch; false if
// one of them is not an eager op (what it touches is unknown).
bool laterAccesses(const neuron_rt::CapturedWork& work, size_t from,
                   std::vector<std::pair<const char*, const char*>>& out) {
  for (size_t i = from; i < work.size(); ++i) {
    auto* item = dynamic_cast<OpItem*>(work.stepTask(i));
    if (!item) return false;
    const AliasPlan& plan = item->operands();
    for (int k = 0; k < plan.count(); ++k) {
      const int s = plan.storageOf(k);
      if (s < 0) continue;
      // Its storage as a whole: cheap, and safe.
      const char* lo = static_cast<const char*>(plan.storageData(s));
      out.emplace_back(lo, lo + plan.storageBytes(s));
    }
  }
  return true;
}

// Whether the rows of the group's LayerNorm each lie in one tile (then it
// can read a temporary from a tile buffer).
bool rowsInTiles(const FusionGroup& g) {
  const int64_t row = g.ops.back().inner;
  if (g.tile % row != 0) return false;
  for (int64_t c : g.chunks)
    if (c % row != 0) return false;
  return true;
}

// Which written temporaries of `g` go to tile buffers (Placement).
void placeTemporaries(const neuron_rt::CapturedWork& work, FusionGroup& g) {
  // Only where a temporary the host dropped is written.
  bool any = false;
  for (const FusedOp& op : g.ops) {
    const AliasPlan& plan = op.item->operands();
    for (int i = 0; i < plan.count() && !any; ++i)
      any = op.item->writes(i) && plan.storageOf(i) >= 0 &&
            !plan.storageHeld(plan.storageOf(i));
  }
  if (!any) return;
  std::vector<std::pair<const char*, const char*>> later;
  if (!laterAccesses(work, g.last, later)) return;
  // Every access of the group in order, with its op.
  struct Seen {
    Access a;
    size_t op;
  };
  std::vector<Seen> seen;
  for (size_t k = 0; k < g.ops.size(); ++k) {
    std::vector<Access> acc;
    accessesOf(g.ops[k], g.numel, acc);
    // An op reads its inputs before it writes its output.
    std::stable_sort(acc.begin(), acc.end(),
                     [](const Access& x, const Access& y) {
                       return !x.written && y.written;
                     });
    for (const Access& a : acc) seen.push_back({a, k});
  }
  for (size_t k = 0; k < g.ops.size(); ++k) {
    FusedOp& op = g.ops[k];
    if (op.rowwise) continue;
    const AliasPlan& plan = op.item->operands();
    for (int i = 0; i < plan.count(); ++i) {
      if (!op.item->writes(i) || op.maps[i] != Mapping::kFull) continue;
      const int s = plan.storageOf(i);
      if (s < 0 || plan.storageHeld(s)) continue;
      const Seen* first = nullptr;
      const Access* mine = nullptr;
      for (const Seen& x : seen)
        if (x.op == k && x.a.operand == i && x.a.written) mine = &x.a;
      if (!mine) continue;
      bool ok = true;
      for (const Seen& x : seen) {
        if (!overlaps(x.a, *mine)) continue;
        if (!first) first = &x;
        // Read by LayerNorm where its rows cross tiles, or only partly the
        // same memory.
        if ((g.ops[x.op].rowwise && !rowsInTiles(g)) || x.a.lo != mine->lo ||
            x.a.hi != mine->hi)
          ok = false;
        // Another tensor in the same memory (the allocator handed the block
        // on) that the host holds: its values must reach memory.
        const AliasPlan& other = g.ops[x.op].item->operands();
        if (other.storageHeld(other.storageOf(x.a.operand))) ok = false;
      }
      // Its first access must write it (it holds nothing from before).
      ok = ok && first && first->op == k && first->a.written &&
           first->a.operand == i;
      for (const auto& [lo, hi] : later)
        ok = ok && (hi <= mine->lo || mine->hi <= lo);
      if (!ok) continue;
      // Every access of the same memory in the group uses the buffer.
      for (const Seen& x : seen)
        if (x.a.lo == mine->lo && x.a.hi == mine->hi)
          g.ops[x.op].places[x.a.operand] = Placement::kTileBuffer;
    }
  }
}

// Chunk starts on the alignment: an inner loop that starts there splits
// only at multiples of kTileAlignment from its start.
bool alignedChunks(const std::vector<int64_t>& chunks) {
  for (int64_t c : chunks)
    if (c % kTileAlignment != 0) return false;
  return true;
}

}  // namespace

MemorySpan operandSpan(const FusedOp& op, int i, int64_t numel) {
  const AliasPlan& plan = op.item->operands();
  const int64_t item = plan.itemsizeOf(i);
  const char* lo =
      static_cast<const char*>(plan.storageData(plan.storageOf(i))) +
      plan.offsetOf(i) * item;
  int64_t elems = 1;  // kScalar
  switch (op.maps[i]) {
    case Mapping::kFull:
      elems = numel;
      break;
    case Mapping::kRow:
      elems = op.inner;
      break;
    case Mapping::kPerRow:
      elems = numel / op.inner;
      break;
    case Mapping::kScalar:
      break;
  }
  return {lo, lo + elems * item};
}

int64_t tileElements(const FusionGroup& group) {
  // Bytes per element of the full-size tensors the ops touch (an in-place
  // chain shares them: each op's half).
  int64_t per_element = 0;
  int64_t row = 0;
  for (const FusedOp& op : group.ops) {
    const AliasPlan& plan = op.item->operands();
    for (int i = 0; i < plan.count(); ++i)
      if (op.maps[i] == Mapping::kFull) per_element += plan.itemsizeOf(i);
    if (op.inner < group.numel) row = std::max(row, op.inner);
  }
  per_element = std::max<int64_t>(per_element / 2, 1);
  int64_t tile = kTileBytes / per_element;
  tile = std::max(tile / kTileAlignment, int64_t{1}) * kTileAlignment;
  // Whole rows where rows are shorter (LayerNorm's too), on the alignment.
  if (row > 0 && row <= tile) {
    const int64_t unit = std::lcm(row, kTileAlignment);
    if (unit <= tile) tile = tile / unit * unit;
  }
  return tile;
}

std::vector<int64_t> parallelChunks(int64_t n, int64_t grain, int threads) {
  // TensorIterator::for_each runs serially below the grain; parallel_for
  // splits into min(threads, ceil(n / grain)) chunks of ceil(n / chunks).
  if (threads <= 1 || n <= grain) return {0, n};
  const int64_t count = std::min<int64_t>(threads, (n + grain - 1) / grain);
  const int64_t size = (n + count - 1) / count;
  std::vector<int64_t> out;
  for (int64_t b = 0; b < n; b += size) out.push_back(b);
  out.push_back(n);
  return out;
}

namespace {

// The chains among `steps`: steps linked, directly or through others, by a
// device storage they both use (a 0-dim scalar on the device links too).
// Each step's chain, as the index of its first step.
std::unordered_map<size_t, size_t> chainsOf(const neuron_rt::CapturedWork& work,
                                            const std::vector<size_t>& steps) {
  std::unordered_map<size_t, size_t> parent;
  auto find = [&](size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  std::unordered_map<const void*, size_t> user;  // storage -> a step using it
  for (size_t i : steps) {
    parent[i] = i;
    auto* item = dynamic_cast<OpItem*>(work.stepTask(i));
    if (!item) continue;
    const AliasPlan& plan = item->operands();
    for (int k = 0; k < plan.count(); ++k) {
      const int st = plan.storageOf(k);
      if (st < 0) continue;
      auto [it, fresh] = user.try_emplace(plan.storageData(st), i);
      if (!fresh) {
        const size_t a = find(it->second), b = find(i);
        if (a != b) parent[std::max(a, b)] = std::min(a, b);
      }
    }
  }
  std::unordered_map<size_t, size_t> out;
  for (size_t i : steps) out[i] = find(i);
  return out;
}

// Plans the steps `steps` of `work` (in order) into groups, appended to
// `groups`. `in_run`: the steps are one chain of a foreach run (no tile
// buffers: its temporaries' memory is not the chain's alone to judge).
void planSteps(const neuron_rt::CapturedWork& work,
               const std::vector<size_t>& steps, int threads, bool in_run,
               std::vector<FusionGroup>& groups) {
  FusionGroup current;
  std::vector<Access> touched;  // by the current group's ops
  std::vector<int64_t> chunks;  // the current group's
  const std::unordered_map<size_t, size_t> chain_of = chainsOf(work, steps);
  size_t current_chain = 0;
  auto close = [&] {
    if (current.ops.size() >= 2) {
      current.chunks = chunks;
      current.tile = tileElements(current);
      // One tile: each op runs whole, in place.
      if (current.numel > current.tile && !in_run)
        placeTemporaries(work, current);
      groups.push_back(std::move(current));
    }
    current = FusionGroup{};
    touched.clear();
    chunks.clear();
  };
  for (size_t i : steps) {
    auto* item = dynamic_cast<OpItem*>(work.stepTask(i));
    FusedOp op;
    int64_t n = 0;
    Grain grain = Grain::kNone;
    bool fits = false;
    if (item && !item->validating()) {
      op.item = item;
      op.step = i;
      if (item->rowLength() > 0) {
        fits = mapRowwise(*item, op, n);
      } else {
        grain = grainOf(item->op());
        fits = grain != Grain::kNone && mapElementwise(*item, op, n);
      }
    }
    if (!fits) {
      close();
      continue;
    }
    op.places.assign(op.maps.size(), Placement::kInPlace);
    // The whole-tensor call's threads and chunks (compute_pool.h: small
    // items run on one thread).
    const int t = n < kSmallItemElements ? 1 : threads;
    std::vector<Access> mine;
    accessesOf(op, n, mine);
    bool ok = selfCompatible(mine);
    std::vector<int64_t> my_chunks;
    int64_t my_grain = kDefaultGrain;
    if (ok && !op.rowwise) {
      my_grain = grainValue(grain, n, t);
      my_chunks = parallelChunks(n, my_grain, t);
      // Rows of an inner loop must split on the alignment too.
      if (op.inner != n)
        ok = op.inner % kTileAlignment == 0 && alignedChunks(my_chunks);
    }
    if (!ok) {
      close();
      continue;
    }
    if (op.rowwise && !current.ops.empty() &&
        !deferStatistics(op, mine, touched))
      ok = false;
    // An op joins a group of its own chain (chains: ops linked by the
    // tensors they share, chainsOf): unrelated chains in one group (an
    // optimizer's parameters one after another) would only shrink the tiles.
    const bool same_chain = chain_of.at(i) == current_chain;
    const bool joins = ok && !current.ops.empty() && current.numel == n &&
                       (op.rowwise || my_chunks == chunks) && same_chain &&
                       compatibleWith(mine, touched);
    if (!joins) {
      close();
      if (op.rowwise) continue;  // a group ends with it; it cannot start one
      current.first = i;
      current_chain = chain_of.at(i);
      current.numel = n;
      current.grain = my_grain;
      current.threads = t;
      chunks = my_chunks;
    }
    current.ops.push_back(std::move(op));
    current.last = i + 1;
    touched.insert(touched.end(), mine.begin(), mine.end());
    if (current.ops.back().rowwise) close();  // a reduction ends the group
  }
  close();
}

// The number of elements the step writes (its first written operand), or
// -1 when it is not an eager op.
int64_t writtenNumel(const neuron_rt::CapturedWork& work, size_t i) {
  auto* item = dynamic_cast<OpItem*>(work.stepTask(i));
  if (!item) return -1;
  const AliasPlan& plan = item->operands();
  for (int k = 0; k < plan.count(); ++k)
    if (item->writes(k) && plan.storageOf(k) >= 0)
      return c10::multiply_integers(plan.sizesOf(k));
  return -1;
}

// A foreach run at step `at`: K blocks of M steps, each block one op over M
// tensors (a _foreach_ op as the eager path queues it, tensor by tensor),
// the j-th step of every block on the j-th tensors. Fused as M chains, one
// after another (chain j: the blocks' j-th steps), each one group: the
// order changes, but each element still sees the ops in their order, as
// long as no chain touches memory another chain writes (checked).
bool foreachRunAt(const neuron_rt::CapturedWork& work, size_t at, int threads,
                  FusionGroup& run) {
  const size_t size = work.size();
  if (at + 3 >= size || work.stepLabel(at) != work.stepLabel(at + 1))
    return false;
  size_t same = 1;  // steps from `at` with its label
  while (at + same < size && work.stepLabel(at + same) == work.stepLabel(at))
    ++same;
  // The block length: a divisor of the first label's run (two foreach ops
  // alike in a row make one run of 2M) giving the most blocks.
  size_t best_m = 0, best_k = 0;
  for (size_t m = 2; m <= same; ++m) {
    if (same % m != 0) continue;
    size_t k = 1;
    for (;; ++k) {
      const size_t b = at + k * m;
      if (b + m > size) break;
      bool ok = true;
      for (size_t j = 0; j < m && ok; ++j)
        ok = work.stepLabel(b + j) == work.stepLabel(b) &&
             writtenNumel(work, b + j) == writtenNumel(work, at + j) &&
             writtenNumel(work, b + j) > 0;
      if (!ok) break;
    }
    if (k >= 2 && k * m > best_k * best_m) best_m = m, best_k = k;
  }
  if (!best_m) return false;
  run = FusionGroup{};
  run.first = at;
  run.last = at + best_k * best_m;
  std::vector<std::vector<Access>> chain_accesses;
  for (size_t j = 0; j < best_m; ++j) {
    std::vector<size_t> steps;
    for (size_t k = 0; k < best_k; ++k) steps.push_back(at + k * best_m + j);
    std::vector<FusionGroup> planned;
    planSteps(work, steps, threads, /*in_run=*/true, planned);
    if (planned.size() != 1 || planned[0].ops.size() != best_k) return false;
    std::vector<Access> acc;
    for (const FusedOp& op : planned[0].ops)
      accessesOf(op, planned[0].numel, acc);
    chain_accesses.push_back(std::move(acc));
    run.chains.push_back(std::move(planned[0]));
  }
  // Chains apart: sort every access by address and compare neighbours that
  // overlap.
  struct Tagged {
    const Access* a;
    size_t chain;
  };
  std::vector<Tagged> all;
  for (size_t c = 0; c < chain_accesses.size(); ++c)
    for (const Access& a : chain_accesses[c]) all.push_back({&a, c});
  std::sort(all.begin(), all.end(),
            [](const Tagged& x, const Tagged& y) { return x.a->lo < y.a->lo; });
  for (size_t x = 0; x < all.size(); ++x)
    for (size_t y = x + 1; y < all.size() && all[y].a->lo < all[x].a->hi; ++y)
      if (all[x].chain != all[y].chain &&
          (all[x].a->written || all[y].a->written))
        return false;
  return true;
}

}  // namespace

std::vector<FusionGroup> planFusion(const neuron_rt::CapturedWork& work,
                                    int threads) {
  std::vector<FusionGroup> groups;
  std::vector<size_t> segment;
  for (size_t i = 0; i < work.size();) {
    FusionGroup run;
    if (foreachRunAt(work, i, threads, run)) {
      planSteps(work, segment, threads, false, groups);
      segment.clear();
      i = run.last;
      groups.push_back(std::move(run));
      continue;
    }
    segment.push_back(i++);
  }
  planSteps(work, segment, threads, false, groups);
  return groups;
}

}  // namespace torch_neuronx::adaptive
