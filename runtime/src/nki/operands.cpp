#include "neuron_runtime/nki/operands.h"

namespace neuron_rt {
namespace nki {

OperandRoles operandRoles(const Instruction& in) {
  OperandRoles r;
  switch (in.op) {
    case Op::kCopy:
    case Op::kReduce:
    case Op::kBnStats:
    case Op::kBnAggr:
    case Op::kTranspose:
      r.reads[0] = true;
      break;
    case Op::kTensorTensor:
    case Op::kGather:      // the data tile and the index tile
    case Op::kDmaDynamic:  // the data and the index
      r.reads[0] = r.reads[1] = true;
      break;
    case Op::kScan:
      r.reads[0] = r.reads[1] = true;
      r.reads[2] = (in.flags & kFlagInitialTile) != 0;
      break;
    case Op::kMatmul:
      r.reads[0] = r.reads[1] = true;
      r.accumulates = (in.flags & kFlagAccumulate) != 0;
      break;
    case Op::kTensorScalar:
    case Op::kActivation:
      r.reads[0] = true;
      r.reads[1] = !(in.flags & kFlagOperand0Imm);
      // An activation always adds its bias; a tensor_scalar whose second
      // operation is bypass never looks at the second scalar.
      r.reads[2] = !(in.flags & kFlagOperand1Imm) &&
                   (in.op == Op::kActivation || in.alu1 != Alu::kBypass);
      break;
    case Op::kSelect:
      r.reads[0] = r.reads[1] = r.reads[2] = true;
      break;
    case Op::kIota:
      r.affine[0] = true;
      break;
    case Op::kAffineSelect:
      r.reads[0] = true;
      r.affine[2] = true;
      break;
    case Op::kMemset:
      break;
    case Op::kMax8:
    case Op::kNonzeroWithCount:
      r.reads[0] = true;
      break;
    case Op::kFindIndex8:  // the data and the 8 values
      r.reads[0] = r.reads[1] = true;
      break;
    case Op::kMatchReplace8:
      r.reads[0] = r.reads[1] = true;
      r.writes[2] = in.src[2].buffer >= 0;  // the matched positions
      break;
    case Op::kRandomSeed:  // the seed tile, unless the seed is immediate
      r.reads[0] = !(in.flags & kFlagOperand0Imm);
      break;
    case Op::kRandom:
      break;
    case Op::kScalar:  // a register load reads its one element
      r.reads[0] = in.src[0].buffer >= 0;
      break;
    case Op::kBranch:
      break;
    case Op::kDropout:  // the data, and the probabilities unless immediate
      r.reads[0] = true;
      r.reads[1] = !(in.flags & kFlagOperand0Imm);
      break;
    case Op::kRawCopy:
      r.reads[0] = true;
      break;
    case Op::kQuantizeMx:  // the source; the scales are a second destination
      r.reads[0] = true;
      r.writes[2] = true;
      break;
    case Op::kMxLoadStationary:  // a matrix and its scales
      r.reads[0] = r.reads[1] = true;
      break;
    case Op::kMatmulMx:
      r.reads[0] = r.reads[1] = true;
      r.accumulates = (in.flags & kFlagAccumulate) != 0;
      break;
  }
  return r;
}

}  // namespace nki
}  // namespace neuron_rt
