// The front end's records (records.h): buildProgram reads what
// encodeBuffer/encodeInstruction write, and every code has a name.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "neuron_runtime/nki/dtype.h"
#include "neuron_runtime/nki/records.h"

using namespace neuron_rt::nki;

TEST(NkiRecordsTest, BuildProgramReadsWhatEncodeWrites) {
  // x (bf16 argument) -> tile -> out, with every header field distinct.
  std::vector<int64_t> bw(3 * kBufferWords), iw(2 * kInstructionWords);
  std::vector<double> imm(2 * kImmediates);
  Buffer x;
  x.dtype = DType::kBF16;
  x.elements = 12;
  x.external = 0;
  x.initialized = true;
  x.loc = 3;
  Buffer t;
  t.space = Space::kSbuf;
  t.dtype = DType::kF32;
  t.elements = 12;
  t.partitions = 3;
  t.bytes_per_partition = 16;
  t.loc = 4;
  Buffer out = x;
  out.external = 1;
  out.initialized = false;
  out.loc = 5;
  encodeBuffer(x, &bw[0]);
  encodeBuffer(t, &bw[kBufferWords]);
  encodeBuffer(out, &bw[2 * kBufferWords]);
  Instruction load;
  load.op = Op::kCopy;
  load.engine = Engine::kDma;
  load.loc = 9;
  load.dst.buffer = 1;
  load.src[0].buffer = 0;
  for (Access* a : {&load.dst, &load.src[0]}) {
    a->ndim = 2;
    a->size[0] = 3;
    a->size[1] = 4;
    a->stride[0] = 4;
    a->stride[1] = 1;
  }
  Instruction act = load;
  act.op = Op::kActivation;
  act.engine = Engine::kScalar;
  act.act = Act::kExp;
  act.alu0 = Alu::kAdd;
  act.alu1 = Alu::kMax;
  act.flags = kFlagOperand0Imm | kFlagOperand1Imm;
  act.keep = 1;
  act.loc = 11;
  act.dst.buffer = 2;
  act.src[0].buffer = 1;
  act.imm[0] = 0.5;
  act.imm[1] = -1.25;
  act.imm[3] = 7;
  encodeInstruction(load, &iw[0], &imm[0]);
  encodeInstruction(act, &iw[kInstructionWords], &imm[kImmediates]);

  const Program p = buildProgram(bw.data(), 3, iw.data(), imm.data(), 2, 2);
  std::vector<int64_t> bw2(bw.size()), iw2(iw.size());
  std::vector<double> imm2(imm.size());
  for (int b = 0; b < 3; ++b)
    encodeBuffer(p.buffers()[b], &bw2[b * kBufferWords]);
  for (int i = 0; i < 2; ++i)
    encodeInstruction(p.instructions()[i], &iw2[i * kInstructionWords],
                      &imm2[i * kImmediates]);
  EXPECT_EQ(bw2, bw);
  EXPECT_EQ(iw2, iw);
  EXPECT_EQ(imm2, imm);
  EXPECT_EQ(p.buffers()[1].bytes_per_partition, 16);
  EXPECT_EQ(p.instructions()[1].act, Act::kExp);
  EXPECT_EQ(iw[kInstructionWords + kInstructionFlags],
            kFlagOperand0Imm | kFlagOperand1Imm);
}

TEST(NkiRecordsTest, MalformedBufferRecordIsRejected) {
  std::vector<int64_t> bw(kBufferWords, 0);
  bw[kBufferSpace] = kSpaces;  // no such memory
  bw[kBufferLoc] = 6;
  try {
    buildProgram(bw.data(), 1, nullptr, nullptr, 0, 0);
    FAIL() << "no error";
  } catch (const ProgramError& e) {
    EXPECT_EQ(e.loc(), 6);
    EXPECT_EQ(std::string(e.what()), "malformed buffer {buffer:0}");
  }
}

TEST(NkiRecordsTest, EveryCodeHasOneName) {
  auto names = [](int n, auto name) {
    std::set<std::string> seen;
    for (int k = 0; k < n; ++k) {
      const std::string s = name(k);
      EXPECT_NE(s, "?") << k;
      EXPECT_TRUE(seen.insert(s).second) << s;
    }
  };
  names(kOps, [](int k) { return opRecordName(static_cast<Op>(k)); });
  names(kEngines, [](int k) { return engineName(static_cast<Engine>(k)); });
  names(static_cast<int>(Alu::kCount),
        [](int k) { return aluName(static_cast<Alu>(k)); });
  names(static_cast<int>(Act::kCount),
        [](int k) { return actName(static_cast<Act>(k)); });
  names(kSpaces, [](int k) { return spaceName(static_cast<Space>(k)); });
  names(static_cast<int>(DType::kCount),
        [](int k) { return dtypeName(static_cast<DType>(k)); });
  names(kFlagNames, [](int k) { return kFlagNameTable[k].name; });
  EXPECT_EQ(opRecordName(static_cast<Op>(kOps)), std::string("?"));
  // The access fields tile the access record exactly.
  int next = 0;
  for (const AccessField& f : kAccessFieldLayout) {
    EXPECT_EQ(f.first_word, next) << f.name;
    next += f.words;
  }
  EXPECT_EQ(next, kAccessWords);
}
