// The NeuronCore cost model: how long a tile program takes on the engines
// of one NeuronCore generation (NeuronCore-v3 by default).
//
// Each instruction costs cycles on its engine from its shape and dtype; the
// engines run their own instruction streams in program order and overlap
// each other, an instruction starting when its engine is free and the data
// it reads (and the memory it overwrites) is ready. DMA transfers share the
// core's slice of the HBM bandwidth and pay a fixed latency that overlaps
// with other transfers (the DMA queues run in parallel).
#pragma once

#include "neuron_runtime/hardware_table.h"
#include "neuron_runtime/nki/program.h"

namespace neuron_rt {
namespace nki {

// The engine clocks, HBM bandwidth and DMA figures of one generation (from
// the hardware table, hardware_table.h) and the documented per-instruction
// costs (NKI ISA reference: MIN_II = 64 cycles; matmul max(min(64,
// stationary free), moving free) cycles, x4 for fp32; Vector N cycles per
// input stream; activation max(64, N); GpSimd 150 + N), which are the same on
// every generation.
struct CostParameters {
  double tensor_ghz;  // 128x128 systolic array
  double vector_ghz;
  double scalar_ghz;
  double gpsimd_ghz;
  // HBM bandwidth per chip, shared by its cores.
  double hbm_bytes_per_ns;
  // The share of that peak DMA transfers achieve (HBM page and descriptor
  // efficiency); calibrated on the tutorial's DMA-bound matmuls (docs/nki.md).
  double dma_efficiency = 0.6;
  double dma_latency_ns;
  // Descriptor generation per DMA instruction (NKI docs: ~600 ns per
  // hardware-DGE DMA on NeuronCore-v3); it holds the DMA queues like the
  // transfer does. With it, the tutorial matmuls' published Trainium1
  // latencies are matched within 2x (docs/nki.md).
  double dma_issue_ns;
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
  // Run-time control flow (control_flow.h): every compute engine's
  // sequencer runs each register operation and branch of a loop or if_else
  // (NKI compiles them to compare-and-branch on each engine). NKI publishes
  // no figure: assumed one MIN_II each, and a register's load from or store
  // to memory the 140 cycles of reading a dynamic offset (above).
  double sequencer_op_cycles = 64;
  double register_memory_cycles = 140;
  // Collectives between ranks (collective_cost.h): a core's share of its
  // chip's collective throughput, a collective's fixed cost and a step
  // between chips (hardware_table.h).
  double cc_bytes_per_ns_per_core = 0;
  double collective_fixed_ns = 0;
  double link_hop_latency_ns = 0;
};

// The parameters of one NeuronCore of `target`; the default is
// kDefaultTarget's (NeuronCore-v3, Trainium2), which a Program's own
// profile() is estimated with.
const CostParameters& costParameters(neuron_rt::Target target);
const CostParameters& defaultCostParameters();

// Nanoseconds one instruction keeps its engine busy.
double instructionCost(const Program& program, const Instruction& in,
                       const CostParameters& p);

// `path`: the instructions in the order a run executed them (Program::run);
// without it, the program's static path (control_flow.h staticPath).
Profile estimateCost(const Program& program,
                     const CostParameters& p = defaultCostParameters(),
                     const std::vector<int32_t>* path = nullptr);

}  // namespace nki
}  // namespace neuron_rt
