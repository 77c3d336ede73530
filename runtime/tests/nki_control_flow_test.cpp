// Run-time control flow in the NKI simulator (control_flow.h): registers,
// a loop whose trip count is read from memory when the program runs, the
// cost of the iterations a run takes, and the errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "neuron_runtime/nki/control_flow.h"
#include "neuron_runtime/nki/cost_model.h"
#include "neuron_runtime/nki/program.h"

using namespace neuron_rt::nki;

namespace {

Access one(int32_t buffer) {
  Access a;
  a.buffer = buffer;
  a.ndim = 2;
  a.size[0] = a.size[1] = 1;
  a.stride[0] = a.stride[1] = 1;
  return a;
}

Instruction scalar(int32_t dst_reg, Alu alu, double a, bool a_imm, double b,
                   bool b_imm) {
  Instruction in;
  in.op = Op::kScalar;
  in.engine = Engine::kGpSimd;
  in.alu0 = alu;
  in.keep = dst_reg;
  in.imm[0] = a;
  in.imm[1] = b;
  in.flags = (a_imm ? kFlagOperand0Imm : 0) | (b_imm ? kFlagOperand1Imm : 0);
  return in;
}

Instruction branch(int32_t reg, Alu when, int64_t target) {
  Instruction in;
  in.op = Op::kBranch;
  in.engine = Engine::kGpSimd;
  in.alu0 = when;
  in.keep = reg;
  in.imm[0] = static_cast<double>(target);
  return in;
}

// Buffers: 0 the count (int32 HBM argument), 1 the result (fp32 HBM), 2 an
// SBUF accumulator [1, 1]. out = (number of iterations) as fp32.
std::vector<Buffer> buffers() {
  std::vector<Buffer> b(3);
  b[0].space = Space::kHbm;
  b[0].dtype = DType::kI32;
  b[0].elements = 1;
  b[0].external = 0;
  b[0].initialized = true;
  b[1].space = Space::kHbm;
  b[1].dtype = DType::kF32;
  b[1].elements = 1;
  b[1].external = 1;
  b[2].space = Space::kSbuf;
  b[2].dtype = DType::kF32;
  b[2].elements = 1;
  b[2].partitions = 1;
  b[2].bytes_per_partition = 4;
  return b;
}

std::vector<Instruction> countingLoop() {
  std::vector<Instruction> p;
  Instruction zero;
  zero.op = Op::kMemset;
  zero.engine = Engine::kVector;
  zero.dst = one(2);
  p.push_back(zero);
  Instruction load = scalar(0, Alu::kBypass, 0, false, 0, false);
  load.src[0] = one(0);  // r0 = count (register_load from HBM)
  p.push_back(load);
  p.push_back(scalar(1, Alu::kBypass, 0, true, 0, false));  // r1 = 0
  // 3: r2 = r1 < r0; 4: exit when r2 == 0
  p.push_back(scalar(2, Alu::kLess, 1, false, 0, false));
  p.push_back(branch(2, Alu::kEqual, 9));
  Instruction add;
  add.op = Op::kTensorScalar;
  add.engine = Engine::kVector;
  add.alu0 = Alu::kAdd;
  add.flags = kFlagOperand0Imm;
  add.imm[0] = 1.0;
  add.dst = one(2);
  add.src[0] = one(2);
  p.push_back(add);
  p.push_back(scalar(1, Alu::kAdd, 1, false, 1, true));  // r1 += 1
  p.push_back(branch(-1, Alu::kBypass, 3));              // back to the test
  Instruction pad = scalar(3, Alu::kBypass, 0, true, 0, false);  // 8
  p.push_back(pad);
  Instruction store;  // 9
  store.op = Op::kCopy;
  store.engine = Engine::kDma;
  store.dst = one(1);
  store.src[0] = one(2);
  p.push_back(store);
  return p;
}

}  // namespace

TEST(NkiControlFlow, LoopRunsTheCountReadAtRunTime) {
  Program prog(buffers(), countingLoop(), 2);
  std::vector<double> us;
  for (int32_t count : {0, 3, 7}) {
    float out = -1;
    void* addrs[2] = {&count, &out};
    std::vector<int32_t> path;
    prog.run(addrs, &path);
    EXPECT_EQ(out, static_cast<float>(count));
    us.push_back(estimateCost(prog, defaultCostParameters(), &path).total_ns);
  }
  // Each iteration costs about the same (the first ones overlap less).
  EXPECT_LT(us[0], us[1]);
  const double later = (us[2] - us[1]) / 4, first = (us[1] - us[0]) / 3;
  EXPECT_NEAR(later, first, 0.1 * first);
  // Without a run, a loop bounded by memory is timed for one iteration.
  const auto path = staticPath(prog.instructions());
  int bodies = 0;
  for (int32_t i : path) bodies += i == 5;
  EXPECT_EQ(bodies, 1);
}

TEST(NkiControlFlow, UnwrittenRegisterIsAnError) {
  auto ins = countingLoop();
  ins[1].src[0].buffer = -1;  // r0 = r0: never written
  Program prog(buffers(), ins, 2);
  int32_t count = 1;
  float out = 0;
  void* addrs[2] = {&count, &out};
  try {
    prog.run(addrs);
    FAIL() << "expected a ProgramError";
  } catch (const ProgramError& e) {
    EXPECT_NE(std::string(e.what()).find("never written"), std::string::npos);
  }
}

TEST(NkiControlFlow, MalformedRecordsAreRefused) {
  auto ins = countingLoop();
  ins[4].imm[0] = 99;  // a target past the program
  EXPECT_THROW(Program(buffers(), ins, 2), ProgramError);
  ins = countingLoop();
  Access wide = one(2);
  wide.size[1] = 2;
  wide.stride[1] = 0;
  ins[1].src[0] = wide;  // a register loads one element
  EXPECT_THROW(Program(buffers(), ins, 2), ProgramError);
}

TEST(NkiControlFlow, Int32ArithmeticWraps) {
  RegisterFile regs;
  Instruction in = scalar(0, Alu::kMultiply, 100000, true, 100000, true);
  runScalar(in, 0, regs, nullptr, DType::kI32, nullptr, DType::kI32);
  EXPECT_EQ(regs.read(0, in, 0), 1410065408);  // NKI's NkiScalar example
}
