// The cost of a collective's transfers between ranks (nki.collectives).
//
// A multi-rank launch records each collective as DMAs between the ranks'
// tensors, flagged kFlagCollective. They do not use the HBM DMA queues: a
// chip's collective-communication cores drive their own DMA rings over
// NeuronLink, so each transfer is costed on its rank's collective channel at
// the rank's share of the chip's collective throughput (hardware_table's
// cc_gb_per_s, the figure the runtime's own collectives use), and the first
// transfer into each rank of a collective carries the collective's fixed
// cost and its algorithm's sequential steps (collective_fixed_ns,
// link_hop_latency_ns).
#pragma once

#include "neuron_runtime/nki/cost_model.h"
#include "neuron_runtime/nki/program.h"

namespace neuron_rt {
namespace nki {

struct CollectiveTransferCost {
  double transfer_ns = 0;  // holds the rank's collective channel
  double latency_ns = 0;   // after it: start, finish and ring steps
};

// A kFlagCollective instruction's cost. Its immediates (written by the
// front end, torch_neuronx/nki/collectives.py): imm[0] the algorithm's
// sequential steps (0 but on the first transfer into a rank), imm[1] the
// launch's LNC (a rank of LNC cores has that many cores' share), imm[2] the
// bytes the algorithm moves per byte of this transfer (a ring all-reduce
// moves 2(n-1)/n of the tensor for the n transfers recorded here).
CollectiveTransferCost collectiveTransferCost(const Program& prog,
                                              const Instruction& in,
                                              const CostParameters& p);

}  // namespace nki
}  // namespace neuron_rt
