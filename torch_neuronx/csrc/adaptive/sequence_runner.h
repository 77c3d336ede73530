// The host's runner for adapted sequences (neuron_rt/sequence_fusion.h): a
// part of an adapted sequence runs its fusion groups (fusion_plan.h) as fused
// passes (fused_pass.h) and its other steps as they are, in order. Installed
// when the library loads; adaptiveSettings().fuse turns it off.
//
// In the profiler a group is one step of the adaptive item, category
// "fused", labelled "fused <first op> .. <last op>", its ops following it
// (marked as inside it). Its Trainium estimate is that of one kernel: one
// launch, the engines' time of all its ops, and HBM traffic only for what
// the group reads from outside and what it writes that the host still held
// when the sequence was released (a temporary the host had dropped by then
// would stay on chip).
#pragma once

#include <neuron_runtime/trace.h>

#include "adaptive/fusion_plan.h"

namespace torch_neuronx::adaptive {

// The estimate of `group` run as one kernel, from its steps' notes (their
// flops) and its tensors. Fills flops, bytes, parts and estimate_ns.
neuron_rt::ItemNote fusedNote(const neuron_rt::CapturedWork& work,
                              const FusionGroup& group);

}  // namespace torch_neuronx::adaptive
