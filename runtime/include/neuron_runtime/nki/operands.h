// Which operands an instruction reads: the one answer every pass over a
// tile program (the structure checks, the memory plan's live ranges, the
// definedness check, the cost model's dependencies) works from.
#pragma once

#include "neuron_runtime/nki/program.h"

namespace neuron_rt {
namespace nki {

// Every instruction writes its destination. Its sources play one of four
// roles: unused (the slot is empty, or holds a value the operation ignores),
// an input read from its buffer, an affine expression of the iteration
// indices that the instruction evaluates (iota, affine_select's predicate;
// no buffer), or a second destination the instruction also writes.
struct OperandRoles {
  bool reads[3] = {false, false, false};   // src[s] is read from memory
  bool affine[3] = {false, false, false};  // src[s] is an affine expression
  // src[s] is a second destination: written, not read (nc_match_replace8's
  // indices).
  bool writes[3] = {false, false, false};
  bool accumulates = false;  // the destination is read too (matmul into PSUM)

  bool uses(int s) const { return reads[s] || affine[s] || writes[s]; }
};

// Exactly the operands the interpreter consults: a tensor_scalar reads its
// second scalar operand only when it applies a second ALU operation, and
// operands given as immediates (the *Imm flags) are not read.
OperandRoles operandRoles(const Instruction& in);

}  // namespace nki
}  // namespace neuron_rt
