#include "adaptive/fused_pass.h"

#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>
#include <neuron_runtime/stream.h>

#include <algorithm>
#include <mutex>
#include <numeric>
#include <vector>

#include "core/openmp_runtime.h"
#include "eager/op_item.h"
#include "eager/run_on_device.h"

namespace torch_neuronx::adaptive {
namespace {

// The tile buffers of a thread (Placement::kTileBuffer): one per
// temporary, found by the alias it stands for. Their memory is the thread's
// own and kept from pass to pass (fresh pages would cost a fault each).
struct TileBuffers {
  int64_t tile = 0;  // elements
  std::vector<std::pair<const void*, c10::Storage>> buffers;
  const c10::Storage& of(const at::Tensor& alias) {
    const void* key = alias.const_data_ptr();
    for (auto& [k, st] : buffers)
      if (k == key) return st;
    thread_local std::vector<at::Tensor> pool;
    const size_t index = buffers.size();
    const int64_t bytes = tile * static_cast<int64_t>(alias.itemsize());
    if (pool.size() <= index) pool.resize(index + 1);
    if (!pool[index].defined() ||
        pool[index].nbytes() < static_cast<size_t>(bytes))
      pool[index] = at::empty({bytes}, at::TensorOptions().dtype(at::kByte));
    buffers.emplace_back(key, pool[index].storage());
    return buffers.back().second;
  }
};

// One op's tensors for a thread: its aliases (built once) and, for the
// operands that follow the iteration space, tile tensors over the same
// memory (or a tile buffer) whose geometry each piece sets.
struct OpTiles {
  const FusedOp* op = nullptr;
  AliasPlan::Built tiles;        // what the kernel is handed
  std::vector<int64_t> offsets;  // each alias's storage offset
  int64_t tile_start = 0;        // the element a tile buffer's first stands for

  void init(const FusedOp& o, const AliasPlan::Built& built,
            TileBuffers* buffers, const std::vector<at::Tensor>* deferred) {
    op = &o;
    tiles = built;
    offsets.assign(built.size(), 0);
    for (size_t k = 0; k < built.size(); ++k) {
      if (o.maps[k] == Mapping::kScalar || !built[k].defined()) continue;
      c10::Storage memory;
      if (o.places[k] == Placement::kTileBuffer) {
        memory = buffers->of(built[k]);
      } else if (o.places[k] == Placement::kDeferred) {
        memory = (*deferred)[k].storage();
      } else {
        memory = built[k].storage();
        offsets[k] = built[k].storage_offset();
      }
      auto impl = c10::make_intrusive<c10::TensorImpl>(
          std::move(memory), c10::DispatchKeySet(c10::DispatchKey::CPU),
          built[k].dtype());
      tiles[k] = at::Tensor(std::move(impl));
    }
  }
  // A tile buffer holds the current tile only.
  int64_t at(size_t k, int64_t element) const {
    return op->places[k] == Placement::kTileBuffer ? element - tile_start
                                                   : element;
  }
  void set(size_t k, c10::IntArrayRef sizes, c10::IntArrayRef strides,
           int64_t offset) {
    tiles[k].unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides,
                                                          offsets[k] + offset);
  }

  // Elements [p, q) of the iteration space, inside one inner loop (a row
  // of op->inner, or all of it).
  void runRange(int64_t p, int64_t q) {
    const int64_t len = q - p;
    for (size_t k = 0; k < tiles.size(); ++k) {
      switch (op->maps[k]) {
        case Mapping::kFull:
          set(k, {len}, {1}, at(k, p));
          break;
        case Mapping::kRow:
          set(k, {len}, {1}, p % op->inner);
          break;
        default:
          break;
      }
    }
    op->item->runOn(tiles);
  }
  // Whole rows [r0, r1) of op->inner elements. A row-wise op's tiles keep
  // its rank (rows, 1, ..., row): its dim argument still names the last.
  void runRows(int64_t r0, int64_t r1) {
    const int64_t row = op->inner;
    c10::SmallVector<int64_t, 5> sizes{r1 - r0}, strides{row};
    if (op->rowwise)
      for (int d = 2; d < op->rank; ++d) {
        sizes.push_back(1);
        strides.push_back(row);
      }
    sizes.push_back(row);
    strides.push_back(1);
    for (size_t k = 0; k < tiles.size(); ++k) {
      switch (op->maps[k]) {
        case Mapping::kFull:
          set(k, sizes, strides, at(k, r0 * row));
          break;
        case Mapping::kRow:
          set(k, {row}, {1}, 0);
          break;
        case Mapping::kPerRow:
          set(k, {r1 - r0}, {1}, r0);
          break;
        default:
          break;
      }
    }
    op->item->runOn(tiles);
  }
  // An elementwise op over [a, b): its inner loops' pieces.
  void runElementwise(int64_t a, int64_t b, int64_t n) {
    const int64_t row = op->inner;
    if (row == n) {
      runRange(a, b);
      return;
    }
    int64_t p = a;
    while (p < b) {
      const int64_t row_start = p / row * row;
      if (p > row_start || b - p < row) {
        const int64_t end = std::min(b, row_start + row);
        runRange(p, end);
        p = end;
      } else {
        const int64_t rows = (b - p) / row;
        runRows(p / row, p / row + rows);
        p += rows * row;
      }
    }
  }
};

}  // namespace

void runFusedPass(const FusionGroup& group) {
  if (!group.chains.empty()) {
    for (const FusionGroup& chain : group.chains) {
      neuron_rt::runWorkerItemHook();  // each as an item: every thread
      runFusedPass(chain);
    }
    return;
  }
  const int64_t n = group.numel;
  const int64_t tile = group.tile;
  runOnDevice([&] {
    if (n <= tile) {  // one tile: the ops as they are
      for (const FusedOp& op : group.ops) {
        AliasPlan::Built built = op.item->operands().build();
        op.item->runOn(built);
      }
      return;
    }
    // The aliases, built once here (on the worker: building sets the item's
    // threads, compute_pool.h); each thread tiles its own views of them.
    std::vector<AliasPlan::Built> built;
    built.reserve(group.ops.size());
    for (const FusedOp& op : group.ops)
      built.push_back(op.item->operands().build());
    // Deferred statistics (the last op's): written here, copied at the end.
    std::vector<at::Tensor> deferred(built.back().size());
    for (size_t k = 0; k < deferred.size(); ++k)
      if (group.ops.back().places[k] == Placement::kDeferred)
        deferred[k] =
            at::empty_like(built.back()[k], at::MemoryFormat::Contiguous);
    const FusedOp* norm =
        group.ops.back().rowwise ? &group.ops.back() : nullptr;
    const size_t elementwise = group.ops.size() - (norm ? 1 : 0);
    const int64_t norm_row = norm ? norm->inner : 0;

    // The chunks' starts, as the threads got them.
    std::mutex starts_mu;
    std::vector<int64_t> starts;
    parallelFor(0, n, group.grain, [&](int64_t begin, int64_t end) {
      {
        std::lock_guard<std::mutex> g(starts_mu);
        starts.push_back(begin);
      }
      TileBuffers buffers;
      buffers.tile = tile;
      std::vector<OpTiles> ops(group.ops.size());
      for (size_t k = 0; k < ops.size(); ++k)
        ops[k].init(group.ops[k], built[k], &buffers, &deferred);
      // Rows of the norm wholly inside this chunk, in order.
      int64_t next_row = norm ? (begin + norm_row - 1) / norm_row : 0;
      for (int64_t a = begin; a < end; a += tile) {
        const int64_t b = std::min(end, a + tile);
        for (size_t k = 0; k < elementwise; ++k) {
          ops[k].tile_start = a;
          ops[k].runElementwise(a, b, n);
        }
        if (norm) {
          ops.back().tile_start = a;
          const int64_t done = b / norm_row;
          if (done > next_row) ops.back().runRows(next_row, done);
          next_row = std::max(next_row, done);
        }
      }
    });
    if (!norm) return;
    // Rows split between two chunks: now both halves are written.
    // (Never when LayerNorm reads a tile buffer: its rows then lie in
    // tiles, chunks included, fusion_plan.cpp.)
    std::sort(starts.begin(), starts.end());
    for (int64_t c : starts)
      if (c > 0 && c % norm_row != 0) {
        TORCH_INTERNAL_ASSERT(
            std::count(norm->places.begin(), norm->places.end(),
                       Placement::kTileBuffer) == 0,
            "fused pass: a row of LayerNorm split between threads reads a "
            "tile buffer");
        OpTiles rows;
        rows.init(*norm, built.back(), nullptr, &deferred);
        const int64_t r = c / norm_row;
        rows.runRows(r, r + 1);
      }
    for (size_t k = 0; k < deferred.size(); ++k)
      if (deferred[k].defined()) built.back()[k].copy_(deferred[k]);
  });
}

}  // namespace torch_neuronx::adaptive
