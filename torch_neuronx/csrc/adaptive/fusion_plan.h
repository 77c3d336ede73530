// Adaptive eager's fusion groups: which consecutive steps of an adapted
// sequence run as ONE pass, tile by tile (fused_pass.h), with results bitwise
// equal to running them one after another.
//
// A group is a chain of elementwise ops over the same iteration space (the N
// elements of their outputs, in row-major order), in-place ops and views that
// keep the layout included, optionally ended by a row-wise normalisation
// (LayerNorm's forward: a reduction ends a group). Random ops, collectives,
// copies, matmuls, NKI kernels and other reductions are boundaries.
//
// Why tiles give the same bits. An elementwise CPU kernel computes each
// element on its own, but not always with the same code: ATen's loops run
// vectors of 2 x the vector width from the start of each inner loop and the
// rest with scalar code, and vectorised exp/erf/fma can round differently
// from the scalar ones. So a tile must hand each element to the same path as
// the whole-tensor call would: tiles start at the whole call's thread
// chunks (the pass splits the same range with the same grain by ATen's rule,
// core/openmp_runtime.h, so its chunks are the kernel's own) and split them
// only at multiples of kTileAlignment elements from an inner loop's start,
// which every vector width divides. Ops whose inner loops are rows (a broadcast
// bias: rows of its length) need rows and chunk starts on that alignment too;
// an op that does not fit stays out of the group. LayerNorm normalises each row
// on its own: it runs over whole rows once the group's ops have written them.
//
// Temporaries the host dropped before the sequence was released (x + b in
// gelu(x + b)) are written to a tile buffer instead of memory: they are
// dead, and only the group reads them (Placement::kTileBuffer).
//
// Two ops of a group may share memory only element for element (the same
// address for the same element: an in-place op on its input, a block the
// allocator handed from one temporary to the next); any other overlap with a
// written tensor (a bias written in the group, a shifted view) ends the group
// there, so that no tile reads what a later tile of another op writes.
#pragma once

#include <neuron_runtime/captured_work.h>

#include <cstdint>
#include <vector>

namespace torch_neuronx {
class OpItem;

namespace adaptive {

// Every vector loop of ATen's kernels (2 vectors of at most 64 bytes, 1-byte
// elements) divides this many elements.
constexpr int64_t kTileAlignment = 128;

// How an operand's elements map to the group's iteration space.
enum class Mapping : uint8_t {
  kFull,    // element i is its element i (contiguous, N elements)
  kRow,     // element i is its element i % row (a bias broadcast over rows)
  kScalar,  // one element for all (a 0-dim tensor, a host scalar), or none
  kPerRow,  // element i is its element i / row (LayerNorm's mean and rstd)
};

// Where an operand's tiles are, when not in its own memory.
enum class Placement : uint8_t {
  kInPlace,  // its own memory
  // A per-thread buffer of one tile: a temporary the host no longer held
  // when the sequence was released and that only the group uses (written
  // before it is read): its values never need to reach memory, as a
  // fused kernel's intermediate would stay on chip.
  kTileBuffer,
  // LayerNorm's mean or rstd where the allocator placed them over memory
  // the group's earlier ops still use: written to a buffer and copied to
  // their place once the pass is done, where plain eager writes them last.
  kDeferred,
};

struct FusedOp {
  OpItem* item = nullptr;
  size_t step = 0;
  std::vector<Mapping> maps;      // one per operand
  std::vector<Placement> places;  // one per operand
  // The length of the kernel's inner loops: a row (an op with a kRow
  // operand, or LayerNorm's normalised size) or N.
  int64_t inner = 0;
  bool rowwise = false;  // LayerNorm, softmax: runs over whole rows
  int rank = 2;          // a row-wise op's input's (its tiles keep it)
};

struct FusionGroup {
  size_t first = 0;  // steps [first, last)
  size_t last = 0;
  int64_t numel = 0;  // N, the iteration space
  // at::parallel_for's grain for the pass: the ops' kernels' own (which all
  // give the same chunks of N on `threads`).
  int64_t grain = 0;
  int threads = 1;
  // The elements of a tile (tileElements).
  int64_t tile = 0;
  // The thread chunks' starts (parallelChunks), then numel.
  std::vector<int64_t> chunks;
  std::vector<FusedOp> ops;
  // A foreach run instead (ops empty): steps [first, last) are K ops over M
  // tensors, run as M chains one after another, each a group of its own
  // (a _foreach_ optimizer's update, parameter by parameter).
  std::vector<FusionGroup> chains;

  // Calls f(op, its group) for every op it runs.
  template <typename F>
  void forEachOp(F&& f) const {
    for (const FusedOp& op : ops) f(op, *this);
    for (const FusionGroup& c : chains) c.forEachOp(f);
  }
  bool fitsOneTile() const {
    if (!chains.empty())
      for (const FusionGroup& c : chains)
        if (!c.fitsOneTile()) return false;
    return chains.empty() ? numel <= tile : true;
  }
};

// The tile of a group: about kTileBytes of its tensors, a multiple of
// kTileAlignment and of its rows where they are shorter. The per-op cost of
// a kernel call (a TensorIterator built for each tile: ~3-5 us) wants tiles
// far larger than L2; the host's L3 (tens of MiB, shared) still holds a
// tile's intermediates between ops. Measured with both threads on a tile
// each (2 cores, benchmarks/adaptive_eager.py --chains; ms per call, plain
// eager 19-22 and 63-94): the 16M-element bias + GELU + residual + LayerNorm
// chain 15.9 at 2 MiB, 15.7 at 4, 14.8-15.1 at 8, 16.5 at 16; the 50M
// AdamW step 76 at 1 MiB, 53-57 at 2, 52-62 at 4, 46-50 at 8, 50-53 at 16.
constexpr int64_t kTileBytes = 8 << 20;
int64_t tileElements(const FusionGroup& group);

// The device memory operand `i` (a device tensor) of `op` touches in a group
// of `numel` elements, as its mapping reads it: [lo, hi).
struct MemorySpan {
  const char* lo;
  const char* hi;
};
MemorySpan operandSpan(const FusedOp& op, int i, int64_t numel);

// The groups among `work`'s steps (steps in none run as they are). On the
// worker, where the part runs; `threads` is what an item starts with.
std::vector<FusionGroup> planFusion(const neuron_rt::CapturedWork& work,
                                    int threads);

// The thread chunks at::parallel_for(0, n, grain) makes with `threads`
// threads (OpenMP's rule): their starts, then n.
std::vector<int64_t> parallelChunks(int64_t n, int64_t grain, int threads);

}  // namespace adaptive
}  // namespace torch_neuronx
