// operandRoles: which operands each instruction reads, and that the passes
// over a program (checks, memory plan, definedness, cost model) follow it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "neuron_runtime/nki/operands.h"
#include "neuron_runtime/nki/program.h"

using namespace neuron_rt::nki;

namespace {

Instruction make(Op op, uint32_t flags = 0, Alu alu1 = Alu::kBypass) {
  Instruction in;
  in.op = op;
  in.flags = flags;
  in.alu1 = alu1;
  return in;
}

// "rrr": src0..src2 read; "a": affine; "-": unused; "+acc": dst read too.
std::string describe(const OperandRoles& r) {
  std::string s;
  for (int k = 0; k < 3; ++k) s += r.reads[k] ? 'r' : r.affine[k] ? 'a' : '-';
  if (r.accumulates) s += "+acc";
  return s;
}

Access row(int32_t buffer, int64_t n) {
  Access a;
  a.buffer = buffer;
  a.ndim = 2;
  a.size[0] = 1;
  a.size[1] = n;
  a.stride[0] = n;
  a.stride[1] = 1;
  return a;
}

Buffer hbm(int64_t n, int32_t ext, bool init) {
  Buffer b;
  b.elements = n;
  b.external = ext;
  b.initialized = init;
  return b;
}

Buffer sbuf(int64_t n) {
  Buffer b;
  b.space = Space::kSbuf;
  b.elements = n;
  b.partitions = 1;
  b.bytes_per_partition = n * 4;
  return b;
}

// out = x * 2 (then `alu1` with tile s1, unless bypass): buffers
// 0 x, 1 out (arguments), 2 x's tile, 3 s1 (a tile nothing writes), 4 result.
Program scaleProgram(Alu alu1) {
  std::vector<Buffer> bufs = {hbm(8, 0, true), hbm(8, 1, false), sbuf(8),
                              sbuf(8), sbuf(8)};
  Instruction load;
  load.op = Op::kCopy;
  load.engine = Engine::kDma;
  load.dst = row(2, 8);
  load.src[0] = row(0, 8);
  Instruction ts = make(Op::kTensorScalar, kFlagOperand0Imm, alu1);
  ts.alu0 = Alu::kMultiply;
  ts.imm[0] = 2;
  ts.dst = row(4, 8);
  ts.src[0] = row(2, 8);
  ts.src[2] = row(3, 8);
  Instruction store;
  store.op = Op::kCopy;
  store.engine = Engine::kDma;
  store.dst = row(1, 8);
  store.src[0] = row(4, 8);
  return Program(bufs, {load, ts, store}, 2);
}

}  // namespace

TEST(NkiOperandRolesTest, EachOpReadsItsOperands) {
  EXPECT_EQ(describe(operandRoles(make(Op::kCopy))), "r--");
  EXPECT_EQ(describe(operandRoles(make(Op::kTensorTensor))), "rr-");
  EXPECT_EQ(describe(operandRoles(make(Op::kReduce))), "r--");
  EXPECT_EQ(describe(operandRoles(make(Op::kMatmul))), "rr-");
  EXPECT_EQ(describe(operandRoles(make(Op::kMatmul, kFlagAccumulate))),
            "rr-+acc");
  EXPECT_EQ(describe(operandRoles(make(Op::kIota))), "a--");
  EXPECT_EQ(describe(operandRoles(make(Op::kMemset))), "---");
  EXPECT_EQ(describe(operandRoles(make(Op::kSelect))), "rrr");
  EXPECT_EQ(describe(operandRoles(make(Op::kAffineSelect))), "r-a");
  EXPECT_EQ(describe(operandRoles(make(Op::kBnStats))), "r--");
  EXPECT_EQ(describe(operandRoles(make(Op::kBnAggr))), "r--");
  EXPECT_EQ(describe(operandRoles(make(Op::kScan))), "rr-");
  // A tile of initial values is read like the data.
  EXPECT_EQ(describe(operandRoles(make(Op::kScan, kFlagInitialTile))), "rrr");
  // The data tile and the index tile of a tensor indirection.
  EXPECT_EQ(describe(operandRoles(make(Op::kGather))), "rr-");
  EXPECT_EQ(describe(operandRoles(make(Op::kTranspose))), "r--");
  // The random instructions: the seed tile; nothing; the data and the
  // per-partition probabilities (unless immediate).
  EXPECT_EQ(describe(operandRoles(make(Op::kRandomSeed))), "r--");
  EXPECT_EQ(describe(operandRoles(make(Op::kRandomSeed, kFlagOperand0Imm))),
            "---");
  EXPECT_EQ(describe(operandRoles(make(Op::kRandom))), "---");
  EXPECT_EQ(describe(operandRoles(make(Op::kDropout))), "rr-");
  EXPECT_EQ(describe(operandRoles(make(Op::kDropout, kFlagOperand0Imm))),
            "r--");
}

TEST(NkiOperandRolesTest, ImmediatesAndBypassAreNotRead) {
  const uint32_t both_imm = kFlagOperand0Imm | kFlagOperand1Imm;
  EXPECT_EQ(describe(operandRoles(make(Op::kTensorScalar, both_imm))), "r--");
  EXPECT_EQ(describe(operandRoles(make(Op::kTensorScalar, kFlagOperand1Imm))),
            "rr-");
  // The second scalar is read only when a second operation uses it.
  EXPECT_EQ(describe(operandRoles(make(Op::kTensorScalar, kFlagOperand0Imm))),
            "r--");
  EXPECT_EQ(describe(operandRoles(
                make(Op::kTensorScalar, kFlagOperand0Imm, Alu::kAdd))),
            "r-r");
  // An activation always adds its bias.
  EXPECT_EQ(describe(operandRoles(make(Op::kActivation, kFlagOperand0Imm))),
            "r-r");
  EXPECT_EQ(describe(operandRoles(make(Op::kActivation, both_imm))), "r--");
  EXPECT_EQ(describe(operandRoles(make(Op::kActivation))), "rrr");
}

TEST(NkiOperandRolesTest, PassesIgnoreAnOperandTheInstructionDoesNotRead) {
  // With a bypass second operation, the never-written tile in src[2] is not
  // an uninitialised read and not live (it takes no scratch memory).
  const Program ok = scaleProgram(Alu::kBypass);
  EXPECT_EQ(ok.scratchBytes(), 2 * 64);  // x's tile, then the result's
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8}, out(8, 0);
  void* ext[2] = {x.data(), out.data()};
  ok.run(ext);
  EXPECT_EQ(out[7], 16.0f);
  // With a second operation it is read, and its garbage reaches `out`.
  try {
    scaleProgram(Alu::kAdd);
    FAIL() << "no error";
  } catch (const ProgramError& e) {
    EXPECT_EQ(e.instruction(), 1);
    EXPECT_NE(std::string(e.what()).find("never written ({buffer:3})"),
              std::string::npos);
  }
}
