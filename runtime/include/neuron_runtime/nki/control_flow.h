// Run-time control flow of a tile program: the engine sequencers' scalar
// registers (NKI's nisa.register_* and NkiScalar, Op::kScalar) and branches
// (nl.dynamic_range, fori_loop, while_loop, if_else: Op::kBranch).
//
// A loop is not unrolled: its body is recorded once, closed by a backward
// branch, and the interpreter repeats it as many times as the registers say
// when the program runs. The passes that look at the program without data
// account for the repetition: the memory plan keeps every tile a loop body
// reads from an earlier iteration (or from before the loop) live through
// the whole loop, and the cost model times the instruction sequence a run
// takes (staticPath: the best the program alone tells).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "neuron_runtime/nki/program.h"

namespace neuron_rt {
namespace nki {

inline bool isControlFlow(Op op) {
  return op == Op::kScalar || op == Op::kBranch;
}

// The registers of one run: none written at its start.
class RegisterFile {
 public:
  // The value of register r; a ProgramError at `in` if it was never written.
  int64_t read(int64_t r, const Instruction& in, int64_t index) const;
  void write(int64_t r, int64_t value);

 private:
  std::vector<int64_t> values_;
  std::vector<uint8_t> written_;
};

// The structure checks of a kScalar / kBranch record (program.cpp's
// checkStructure calls it): registers and branch targets in range, one
// element moved to or from memory, a known width. Throws ProgramError.
void checkControlFlow(const std::vector<Buffer>& buffers, const Instruction& in,
                      int64_t index, int64_t count);

// Executes a kScalar: `src` / `dst` are the addresses of its one-element
// operands in memory (nullptr when it has none) of types src_type /
// dst_type.
void runScalar(const Instruction& in, int64_t index, RegisterFile& regs,
               const void* src, DType src_type, void* dst, DType dst_type);

// The instruction after the kBranch at `index`.
int64_t branchTarget(const Instruction& in, int64_t index,
                     const RegisterFile& regs);

// A run stops with a ProgramError after this many backward branches (a
// while loop whose condition never becomes zero would hang the hardware).
constexpr int64_t kMaxBackwardBranches = int64_t{1} << 28;

// The loops of a program: [first, last] instruction ranges, a backward
// branch's target to the branch.
std::vector<std::pair<int64_t, int64_t>> loopRanges(
    const std::vector<Instruction>& instructions);

// The memory plan across loops (program.cpp's planMemory calls it with its
// on-chip live segments per buffer and first/last use): a buffer live at a
// loop's entry, or one whose value in an iteration may come from the one
// before (its first segment in the loop does not start with a write of the
// whole buffer), stays live through the whole loop; a buffer written whole
// and consumed within each iteration keeps its segments.
void extendLiveRangesOverLoops(
    const std::vector<Buffer>& buffers,
    const std::vector<Instruction>& instructions,
    std::vector<std::vector<std::pair<int64_t, int64_t>>>& segments,
    std::vector<int64_t>& first, std::vector<int64_t>& last);

// The instruction sequence the cost model times when no run told it more:
// the program executed without data, registers computed from constants
// evaluated, a register read from memory unknown. A loop whose bound is
// unknown runs once (a branch on an unknown value is not taken the first
// time it is met and taken afterwards), an if_else on an unknown condition
// takes its then-branch. At most kMaxStaticPath instructions.
std::vector<int32_t> staticPath(const std::vector<Instruction>& instructions);
constexpr size_t kMaxStaticPath = size_t{1} << 24;

// Whether the program branches (its cost then follows a path).
bool hasControlFlow(const std::vector<Instruction>& instructions);

}  // namespace nki
}  // namespace neuron_rt
