#include "neuron_runtime/nki/collective_cost.h"

#include <algorithm>

#include "neuron_runtime/nki/dtype.h"

namespace neuron_rt {
namespace nki {

CollectiveTransferCost collectiveTransferCost(const Program& prog,
                                              const Instruction& in,
                                              const CostParameters& p) {
  CollectiveTransferCost c;
  const Buffer& dst = prog.buffers()[in.dst.buffer];
  const double bytes = static_cast<double>(in.dst.count()) *
                       static_cast<double>(elementSize(dst.dtype));
  const double lnc = std::max(1.0, in.imm[1]);
  // The chip's collective throughput is shared by its cores; a rank (one
  // logical core) has its cores' share.
  const double rate = p.cc_bytes_per_ns_per_core * lnc;
  c.transfer_ns = rate > 0 ? bytes * std::max(0.0, in.imm[2]) / rate : 0.0;
  if (in.imm[0] > 0)
    c.latency_ns = p.collective_fixed_ns + in.imm[0] * p.link_hop_latency_ns;
  return c;
}

}  // namespace nki
}  // namespace neuron_rt
