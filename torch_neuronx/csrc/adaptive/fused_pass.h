// Runs a fusion group (fusion_plan.h) as one pass: each thread takes the
// chunk of the iteration space the ops' kernels would give it and walks it
// tile by tile, running every op of the group over the tile (the op's own CPU
// kernel, over views of its tensors) before the next tile, so a tile's
// intermediates are still in cache when the next op reads them. LayerNorm
// ending a group normalises rows as soon as the tiles have written them
// (rows split between two threads' chunks: once both are done).
//
// A group no larger than one tile runs its ops one after another, as they
// are: the same work, one step in the trace.
#pragma once

#include "adaptive/fusion_plan.h"

namespace torch_neuronx::adaptive {

// On the worker, inside the item: runs the group's ops.
void runFusedPass(const FusionGroup& group);

}  // namespace torch_neuronx::adaptive
