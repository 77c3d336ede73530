// The NeuronCore-v3 cost model: how long a tile program takes on the
// engines.
//
// Each instruction costs cycles on its engine from its shape and dtype; the
// engines run their own instruction streams in program order and overlap
// each other, an instruction starting when its engine is free and the data
// it reads (and the memory it overwrites) is ready. DMA transfers share the
// core's slice of the HBM bandwidth and pay a fixed latency that overlaps
// with other transfers (the DMA queues run in parallel).
#pragma once

#include "neuron_runtime/nki/program.h"

namespace neuron_rt {
namespace nki {

// Engine clocks and the documented per-instruction costs (NKI ISA
// reference: MIN_II = 64 cycles; matmul max(min(64, stationary free),
// moving free) cycles, x4 for fp32; Vector N cycles per input stream;
// activation max(64, N); GpSimd 150 + N).
struct CostParameters {
  double tensor_ghz = 2.4;  // 128x128 systolic array
  double vector_ghz = 0.96;
  double scalar_ghz = 1.2;
  double gpsimd_ghz = 1.2;
  // HBM bandwidth per chip, shared by its cores.
  double hbm_bytes_per_ns = 2900.0 / 8.0;
  // The share of that peak DMA transfers achieve (HBM page and descriptor
  // efficiency); calibrated on the tutorial's DMA-bound matmuls (README).
  double dma_efficiency = 0.6;
  double dma_latency_ns = 2000.0;
  // Descriptor generation per DMA instruction (NKI docs: ~600 ns per
  // hardware-DGE DMA on NeuronCore-v3); it holds the DMA queues like the
  // transfer does. With it, the tutorial matmuls' published Trainium1
  // latencies are matched within 2x (README).
  double dma_issue_ns = 600.0;
  // Rows shorter than this move at the rate of a row this long (DMA
  // descriptors are most efficient from 512 contiguous bytes).
  int64_t dma_efficient_row_bytes = 512;
  // A DMA at an offset read at run time first reads its index from SBUF:
  // ~140 GpSimd cycles (the figure NKI documents for reading the dynamic
  // offsets of tensor_copy_dynamic_src into an engine).
  double dma_dynamic_index_cycles = 140;
  // An indirect DMA (a gather or a scatter of rows) is descriptor-driven:
  // the GpSimd engine writes one descriptor per row (software DGE) and each
  // row is its own transfer. NKI publishes no per-descriptor figure; this
  // assumes one minimum instruction interval (MIN_II, 64 cycles) each.
  double dma_descriptor_cycles = 64;
  double min_ii_cycles = 64;
  double gpsimd_fixed_cycles = 150;
};

// NeuronCore-v3 (Trainium2), the default, and NeuronCore-v2 (Trainium1:
// 2.8 / 1.12 / 1.4 GHz, 820 GB/s HBM shared by 2 cores), whose figures the
// NKI tutorials publish.
const CostParameters& trainium2CostParameters();
const CostParameters& trainium1CostParameters();
const CostParameters& defaultCostParameters();  // Trainium2

// Nanoseconds one instruction keeps its engine busy.
double instructionCost(const Program& program, const Instruction& in,
                       const CostParameters& p);

Profile estimateCost(const Program& program,
                     const CostParameters& p = defaultCostParameters());

}  // namespace nki
}  // namespace neuron_rt
