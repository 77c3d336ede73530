#include "neuron_runtime/nki/control_flow.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "neuron_runtime/nki/operands.h"

namespace neuron_rt {
namespace nki {
namespace {

std::string registerName(int64_t r) { return "register " + std::to_string(r); }

bool isRegisterIndex(double v) {
  return v >= 0 && v < 2147483647.0 && v == std::floor(v);
}

// The value wrapped to the scalar's width (NKI's scalars never widen: int32
// arithmetic wraps, uint32 is modulo 2^32).
int64_t wrap(int64_t v, int width) {
  const uint64_t u = static_cast<uint64_t>(v);
  if (width == kScalarInt32)
    return static_cast<int32_t>(static_cast<uint32_t>(u));
  if (width == kScalarUint32) return static_cast<int64_t>(u & 0xffffffffu);
  return v;
}

int64_t apply(Alu op, int64_t a, int64_t b, const Instruction& in,
              int64_t index) {
  // Two's-complement arithmetic without signed overflow (wrap() narrows).
  const auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  switch (op) {
    case Alu::kBypass:
      return a;
    case Alu::kAdd:
      return static_cast<int64_t>(ua + ub);
    case Alu::kSubtract:
      return static_cast<int64_t>(ua - ub);
    case Alu::kMultiply:
      return static_cast<int64_t>(ua * ub);
    case Alu::kDivide:
    case Alu::kMod:
      if (b == 0)
        throw ProgramError(in.loc, index,
                           "scalar: division by zero (a register value read "
                           "at run time)");
      if (a == INT64_MIN && b == -1) return op == Alu::kDivide ? a : 0;
      // Integer division truncates, and the remainder has the dividend's
      // sign (C's, and fmod's, convention).
      return op == Alu::kDivide ? a / b : a % b;
    case Alu::kMax:
      return std::max(a, b);
    case Alu::kMin:
      return std::min(a, b);
    case Alu::kEqual:
      return a == b;
    case Alu::kNotEqual:
      return a != b;
    case Alu::kGreater:
      return a > b;
    case Alu::kGreaterEqual:
      return a >= b;
    case Alu::kLess:
      return a < b;
    case Alu::kLessEqual:
      return a <= b;
    case Alu::kLogicalAnd:
      return a != 0 && b != 0;
    case Alu::kLogicalOr:
      return a != 0 || b != 0;
    case Alu::kLogicalXor:
      return (a != 0) != (b != 0);
    case Alu::kBitwiseAnd:
      return a & b;
    case Alu::kBitwiseOr:
      return a | b;
    case Alu::kBitwiseXor:
      return a ^ b;
    case Alu::kLeftShift:
      return b < 0 || b > 63 ? 0 : static_cast<int64_t>(ua << b);
    case Alu::kRightShift:
      return b < 0 || b > 63 ? (a < 0 ? -1 : 0) : a >> b;
    default:
      throw ProgramError(in.loc, index,
                         "scalar: the operation is not one of a scalar's");
  }
}

int64_t loadElement(const void* p, DType t) {
  switch (t) {
    case DType::kI32: {
      int32_t v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case DType::kU32: {
      uint32_t v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case DType::kI16: {
      int16_t v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case DType::kU16: {
      uint16_t v;
      std::memcpy(&v, p, sizeof v);
      return v;
    }
    case DType::kI8:
      return *static_cast<const int8_t*>(p);
    case DType::kU8:
    case DType::kBool:
      return *static_cast<const uint8_t*>(p);
    default: {  // a float: its value truncated toward zero
      float f;
      loadRow(t, p, 1, 1, &f);
      if (!std::isfinite(f)) return 0;
      return static_cast<int64_t>(
          std::max(-9.2e18, std::min(9.2e18, static_cast<double>(f))));
    }
  }
}

void storeElement(void* p, DType t, int64_t v) {
  if (isFloat(t)) {
    const float f = static_cast<float>(v);
    storeRow(t, p, 1, 1, &f);
    return;
  }
  // Integers: the value's low bytes (little-endian), as the hardware writes
  // a register into a narrower element.
  const uint64_t u = static_cast<uint64_t>(v);
  std::memcpy(p, &u, static_cast<size_t>(elementSize(t)));
}

// Whether instruction `in` writes every element of buffer b without reading
// it: the start of a new value of b.
bool writesWholeWithoutReading(const Instruction& in, int32_t b,
                               const Buffer& buf) {
  if (in.dst.buffer != b) return false;
  const OperandRoles roles = operandRoles(in);
  if (roles.accumulates || in.op == Op::kDmaDynamic ||
      in.op == Op::kNonzeroWithCount)
    return false;
  for (int s = 0; s < 3; ++s)
    if ((roles.reads[s] || roles.writes[s]) && in.src[s].buffer == b)
      return false;
  const Access& a = in.dst;
  if (a.offset != 0 || a.count() != buf.elements) return false;
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (int d = 0; d < a.ndim; ++d)
    if (a.size[d] > 1) dims.emplace_back(a.stride[d], a.size[d]);
  std::sort(dims.begin(), dims.end());
  int64_t expect = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expect) return false;
    expect *= size;
  }
  return true;
}

}  // namespace

int64_t RegisterFile::read(int64_t r, const Instruction& in,
                           int64_t index) const {
  if (r < 0 || r >= static_cast<int64_t>(values_.size()) || !written_[r])
    throw ProgramError(in.loc, index,
                       "reads " + registerName(r) +
                           ", which was never written (an unloaded register)");
  return values_[r];
}

void RegisterFile::write(int64_t r, int64_t value) {
  if (r >= static_cast<int64_t>(values_.size())) {
    values_.resize(static_cast<size_t>(r) + 1, 0);
    written_.resize(static_cast<size_t>(r) + 1, 0);
  }
  values_[r] = value;
  written_[r] = 1;
}

void checkControlFlow(const std::vector<Buffer>& buffers, const Instruction& in,
                      int64_t index, int64_t count) {
  auto fail = [&](const std::string& why) {
    throw ProgramError(
        in.loc, index,
        std::string(in.op == Op::kScalar ? "scalar" : "branch") + ": " + why);
  };
  if (in.op == Op::kBranch) {
    if (!(in.imm[0] >= 0 && in.imm[0] <= static_cast<double>(count) &&
          in.imm[0] == std::floor(in.imm[0])))
      fail("the target is not an instruction of the program");
    if (in.alu0 != Alu::kBypass) {
      if (in.alu0 != Alu::kEqual && in.alu0 != Alu::kNotEqual)
        fail("the condition is not a comparison with zero");
      if (in.keep < 0) fail("the condition names no register");
    }
    return;
  }
  const int width = static_cast<int>(in.imm[2]);
  if (in.imm[2] != width || (width != kScalarInt32 && width != kScalarUint32 &&
                             width != kScalarInt64))
    fail("unknown scalar width");
  const bool loads = in.src[0].buffer >= 0;
  if (!loads && !(in.flags & kFlagOperand0Imm) && !isRegisterIndex(in.imm[0]))
    fail("the first operand names no register");
  if (in.alu0 != Alu::kBypass && !(in.flags & kFlagOperand1Imm) &&
      !isRegisterIndex(in.imm[1]))
    fail("the second operand names no register");
  if (in.keep < -1) fail("bad destination register");
  if (in.keep < 0 && in.dst.buffer < 0) fail("writes nothing");
  for (const Access* a : {&in.src[0], &in.dst}) {
    if (a->buffer < 0) continue;
    if (a->count() != 1)
      fail("a register moves one element from or to memory, not " +
           std::to_string(a->count()));
    if (buffers[a->buffer].space == Space::kPsum)
      fail("registers move from and to SBUF or HBM, not PSUM");
  }
}

void runScalar(const Instruction& in, int64_t index, RegisterFile& regs,
               const void* src, DType src_type, void* dst, DType dst_type) {
  const int width = static_cast<int>(in.imm[2]);
  int64_t a;
  if (src != nullptr) {
    a = loadElement(src, src_type);
  } else if (in.flags & kFlagOperand0Imm) {
    a = static_cast<int64_t>(in.imm[0]);
  } else {
    a = regs.read(static_cast<int64_t>(in.imm[0]), in, index);
  }
  int64_t v = a;
  if (in.alu0 != Alu::kBypass) {
    const int64_t b =
        in.flags & kFlagOperand1Imm
            ? static_cast<int64_t>(in.imm[1])
            : regs.read(static_cast<int64_t>(in.imm[1]), in, index);
    v = apply(in.alu0, wrap(a, width), wrap(b, width), in, index);
  }
  v = wrap(v, width);
  if (in.keep >= 0) regs.write(in.keep, v);
  if (dst != nullptr) storeElement(dst, dst_type, v);
}

int64_t branchTarget(const Instruction& in, int64_t index,
                     const RegisterFile& regs) {
  const int64_t target = static_cast<int64_t>(in.imm[0]);
  if (in.alu0 == Alu::kBypass) return target;
  const int64_t v = regs.read(in.keep, in, index);
  const bool taken = in.alu0 == Alu::kEqual ? v == 0 : v != 0;
  return taken ? target : index + 1;
}

std::vector<std::pair<int64_t, int64_t>> loopRanges(
    const std::vector<Instruction>& instructions) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (size_t i = 0; i < instructions.size(); ++i) {
    const Instruction& in = instructions[i];
    if (in.op != Op::kBranch) continue;
    const int64_t target = static_cast<int64_t>(in.imm[0]);
    if (target <= static_cast<int64_t>(i))
      out.emplace_back(target, static_cast<int64_t>(i));
  }
  // Inner loops first: an outer loop then sees the ranges they extended.
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) {
    return x.second - x.first < y.second - y.first;
  });
  return out;
}

bool hasControlFlow(const std::vector<Instruction>& instructions) {
  for (const Instruction& in : instructions)
    if (in.op == Op::kBranch) return true;
  return false;
}

void extendLiveRangesOverLoops(
    const std::vector<Buffer>& buffers,
    const std::vector<Instruction>& instructions,
    std::vector<std::vector<std::pair<int64_t, int64_t>>>& segments,
    std::vector<int64_t>& first, std::vector<int64_t>& last) {
  const auto loops = loopRanges(instructions);
  if (loops.empty()) return;
  for (const auto& [lo, hi] : loops) {
    for (size_t b = 0; b < segments.size(); ++b) {
      auto& segs = segments[b];
      size_t k0 = segs.size(), k1 = 0;
      bool contained = true;
      for (size_t k = 0; k < segs.size(); ++k) {
        if (segs[k].first > hi || segs[k].second < lo) continue;
        k0 = std::min(k0, k);
        k1 = k;
        contained &= segs[k].first >= lo && segs[k].second <= hi;
      }
      if (k0 == segs.size()) continue;
      // Iteration-local: each value of the buffer in the loop starts with
      // a write of all of it (each later segment does, by construction).
      if (contained &&
          writesWholeWithoutReading(instructions[segs[k0].first],
                                    static_cast<int32_t>(b), buffers[b]))
        continue;
      const std::pair<int64_t, int64_t> merged{std::min(lo, segs[k0].first),
                                               std::max(hi, segs[k1].second)};
      segs.erase(segs.begin() + static_cast<long>(k0),
                 segs.begin() + static_cast<long>(k1) + 1);
      segs.insert(segs.begin() + static_cast<long>(k0), merged);
    }
  }
  for (size_t b = 0; b < segments.size(); ++b) {
    if (segments[b].empty()) continue;
    first[b] = segments[b].front().first;
    last[b] = segments[b].back().second;
  }
}

std::vector<int32_t> staticPath(const std::vector<Instruction>& instructions) {
  const int64_t n = static_cast<int64_t>(instructions.size());
  std::vector<int32_t> path;
  std::vector<int64_t> value;
  std::vector<uint8_t> known;
  std::vector<uint8_t> taken_last(static_cast<size_t>(n), 1);
  auto reg = [&](int64_t r, int64_t& v) {
    if (r < 0 || r >= static_cast<int64_t>(known.size()) || !known[r])
      return false;
    v = value[r];
    return true;
  };
  auto set = [&](int64_t r, bool is_known, int64_t v) {
    if (r < 0) return;
    if (r >= static_cast<int64_t>(known.size())) {
      known.resize(static_cast<size_t>(r) + 1, 0);
      value.resize(static_cast<size_t>(r) + 1, 0);
    }
    known[r] = is_known;
    value[r] = v;
  };
  for (int64_t i = 0; i < n && path.size() < kMaxStaticPath;) {
    const Instruction& in = instructions[i];
    path.push_back(static_cast<int32_t>(i));
    if (in.op == Op::kScalar) {
      const int width = static_cast<int>(in.imm[2]);
      int64_t a = 0, b = 0;
      bool ok = in.src[0].buffer < 0;
      if (ok) {
        if (in.flags & kFlagOperand0Imm) {
          a = static_cast<int64_t>(in.imm[0]);
        } else {
          ok = reg(static_cast<int64_t>(in.imm[0]), a);
        }
      }
      if (ok && in.alu0 != Alu::kBypass) {
        if (in.flags & kFlagOperand1Imm) {
          b = static_cast<int64_t>(in.imm[1]);
        } else {
          ok = reg(static_cast<int64_t>(in.imm[1]), b);
        }
      }
      int64_t v = 0;
      if (ok) {
        try {
          v = wrap(in.alu0 == Alu::kBypass
                       ? a
                       : apply(in.alu0, wrap(a, width), wrap(b, width), in, i),
                   width);
        } catch (const ProgramError&) {
          ok = false;  // the run decides (and reports) it
        }
      }
      set(in.keep, ok, v);
      ++i;
      continue;
    }
    if (in.op == Op::kBranch) {
      const int64_t target = static_cast<int64_t>(in.imm[0]);
      bool taken = true;
      if (in.alu0 != Alu::kBypass) {
        int64_t v;
        if (reg(in.keep, v)) {
          taken = in.alu0 == Alu::kEqual ? v == 0 : v != 0;
        } else {
          // Unknown: alternately not taken (into a loop's body, an
          // if_else's then-branch) and taken.
          taken = !taken_last[i];
          taken_last[i] = taken;
        }
      }
      i = taken ? target : i + 1;
      continue;
    }
    ++i;
  }
  return path;
}

}  // namespace nki
}  // namespace neuron_rt
