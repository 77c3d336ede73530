// The NKI tile-program simulator on its own: a matmul kernel's records built
// by hand, its checks, its memory plan and its cost estimate.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "neuron_runtime/nki/cost_model.h"
#include "neuron_runtime/nki/program.h"

using namespace neuron_rt::nki;

namespace {

Access access2d(int32_t buffer, int64_t offset, int64_t rows, int64_t rs,
                int64_t cols, int64_t cs) {
  Access a;
  a.buffer = buffer;
  a.ndim = 2;
  a.offset = offset;
  a.size[0] = rows;
  a.size[1] = cols;
  a.stride[0] = rs;
  a.stride[1] = cs;
  return a;
}

Buffer hbm(DType t, int64_t n, int32_t ext, bool init) {
  Buffer b;
  b.space = Space::kHbm;
  b.dtype = t;
  b.elements = n;
  b.external = ext;
  b.initialized = init;
  return b;
}

Buffer tile(Space s, DType t, int64_t p, int64_t f) {
  Buffer b;
  b.space = s;
  b.dtype = t;
  b.elements = p * f;
  b.partitions = p;
  b.bytes_per_partition = f * elementSize(t);
  return b;
}

Instruction copy(Engine e, Access dst, Access src) {
  Instruction in;
  in.op = Op::kCopy;
  in.engine = e;
  in.dst = dst;
  in.src[0] = src;
  return in;
}

// out[M,N] = a[K,M]^T b[K,N] through SBUF and PSUM.
std::vector<Instruction> matmulProgram(int64_t K, int64_t M, int64_t N) {
  std::vector<Instruction> p;
  p.push_back(copy(Engine::kDma, access2d(3, 0, K, M, M, 1),
                   access2d(0, 0, K, M, M, 1)));
  p.push_back(copy(Engine::kDma, access2d(4, 0, K, N, N, 1),
                   access2d(1, 0, K, N, N, 1)));
  Instruction mm;
  mm.op = Op::kMatmul;
  mm.engine = Engine::kTensor;
  mm.dst = access2d(5, 0, M, N, N, 1);
  mm.src[0] = access2d(3, 0, K, M, M, 1);
  mm.src[1] = access2d(4, 0, K, N, N, 1);
  p.push_back(mm);
  p.push_back(copy(Engine::kVector, access2d(6, 0, M, N, N, 1),
                   access2d(5, 0, M, N, N, 1)));
  p.push_back(copy(Engine::kDma, access2d(2, 0, M, N, N, 1),
                   access2d(6, 0, M, N, N, 1)));
  return p;
}

std::vector<Buffer> matmulBuffers(int64_t K, int64_t M, int64_t N) {
  return {hbm(DType::kF32, K * M, 0, true),
          hbm(DType::kF32, K * N, 1, true),
          hbm(DType::kF32, M * N, 2, false),
          tile(Space::kSbuf, DType::kF32, K, M),
          tile(Space::kSbuf, DType::kF32, K, N),
          tile(Space::kPsum, DType::kF32, M, N),
          tile(Space::kSbuf, DType::kF32, M, N)};
}

// out[K, D] = table[idx[k], :] (vector: one row per partition) or
// out[K, D] = table[idx[0] + k, :] (scalar: a window from a run-time start).
// Arguments: 0 table [R, D], 1 idx [K] int32, 2 out [K, D].
Program dynamicGatherProgram(int64_t R, int64_t D, int64_t K, bool vector,
                             bool skip) {
  std::vector<Buffer> bufs = {
      hbm(DType::kF32, R * D, 0, true), hbm(DType::kI32, K, 1, true),
      hbm(DType::kF32, K * D, 2, false), tile(Space::kSbuf, DType::kI32, K, 1),
      tile(Space::kSbuf, DType::kF32, K, D)};
  std::vector<Instruction> p;
  p.push_back(copy(Engine::kDma, access2d(3, 0, K, 1, 1, 1),
                   access2d(1, 0, K, 1, 1, 1)));
  Instruction g;
  g.op = Op::kDmaDynamic;
  g.engine = Engine::kDma;
  g.loc = 9;
  g.flags = (vector ? kFlagVectorOffset : 0) | (skip ? kFlagOobSkip : 0);
  g.dst = access2d(4, 0, K, D, D, 1);
  // The static part of the source: row 0 (vector: every partition's).
  g.src[0] = access2d(0, 0, K, vector ? 0 : D, D, 1);
  g.src[1].buffer = 3;
  g.src[1].ndim = 1;
  g.src[1].size[0] = vector ? K : 1;
  g.src[1].stride[0] = 1;
  g.imm[0] = static_cast<double>(D);  // elements per index step
  g.imm[1] = static_cast<double>(R);  // rows
  g.imm[2] = 0;
  g.imm[3] = vector ? 0 : static_cast<double>(K - 1);
  p.push_back(g);
  p.push_back(copy(Engine::kDma, access2d(2, 0, K, D, D, 1),
                   access2d(4, 0, K, D, D, 1)));
  return Program(bufs, p, 3);
}

}  // namespace

TEST(NkiProgramTest, MatmulMatchesReference) {
  const int64_t K = 128, M = 96, N = 200;
  Program prog(matmulBuffers(K, M, N), matmulProgram(K, M, N), 3);
  std::vector<float> a(K * M), b(K * N), out(M * N, -1);
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.1f * i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(0.07f * i);
  void* ext[3] = {a.data(), b.data(), out.data()};
  prog.run(ext);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = 0;
      for (int64_t k = 0; k < K; ++k) ref += a[k * M + m] * b[k * N + n];
      ASSERT_NEAR(out[m * N + n], ref, 1e-3) << m << "," << n;
    }
  const Profile& pr = prog.profile();
  EXPECT_GT(pr.total_ns, 0);
  EXPECT_EQ(pr.matmul_flops, 2 * K * M * N);
  EXPECT_EQ(pr.instructions[static_cast<int>(Engine::kDma)], 3);
  EXPECT_EQ(pr.sbuf_high_water, (M + N) * 4);  // the inputs, then the result
  EXPECT_EQ(pr.psum_high_water, 2048);
}

TEST(NkiProgramTest, UninitializedReadIsReportedWhenItReachesAResult) {
  auto prog = matmulProgram(8, 8, 8);
  prog.erase(prog.begin() + 1);  // b is never loaded into its tile
  prog[1].loc = 42;              // the matmul reads it
  prog[3].loc = 7;               // the store publishes the result
  try {
    Program p(matmulBuffers(8, 8, 8), prog, 3);
    FAIL() << "no error";
  } catch (const ProgramError& e) {
    EXPECT_EQ(e.loc(), 42);
    const std::string what = e.what();
    EXPECT_NE(what.find("never written ({buffer:4})"), std::string::npos);
    EXPECT_NE(what.find("{buffer:2}"), std::string::npos);
    EXPECT_NE(what.find("{loc:7}"), std::string::npos);
  }
  // Undefined values that never reach a result are not an error (a masked
  // tail of a tile computed on and dropped).
  prog.pop_back();
  Program ok(matmulBuffers(8, 8, 8), prog, 3);
}

TEST(NkiProgramTest, OutOfBoundsAccessIsReported) {
  auto prog = matmulProgram(8, 8, 8);
  prog[0].src[0].offset = 1;  // one element past the end of a
  EXPECT_THROW(Program(matmulBuffers(8, 8, 8), prog, 3), ProgramError);
}

TEST(NkiProgramTest, SbufCapacityCountsLiveTiles) {
  // Two tiles of 120 KiB per partition live at once do not fit in 224 KiB
  // (NeuronCore-v3's 28 MiB).
  constexpr int64_t kF = 30720;
  std::vector<Buffer> bufs = {hbm(DType::kF32, 128 * kF, 0, true),
                              tile(Space::kSbuf, DType::kF32, 128, kF),
                              tile(Space::kSbuf, DType::kF32, 128, kF)};
  std::vector<Instruction> prog = {
      copy(Engine::kDma, access2d(1, 0, 128, kF, kF, 1),
           access2d(0, 0, 128, kF, kF, 1)),
      copy(Engine::kVector, access2d(2, 0, 128, kF, kF, 1),
           access2d(1, 0, 128, kF, kF, 1)),
      copy(Engine::kDma, access2d(0, 0, 128, kF, kF, 1),
           access2d(2, 0, 128, kF, kF, 1))};
  try {
    Program p(bufs, prog, 1);
    FAIL() << "no error";
  } catch (const ProgramError& e) {
    EXPECT_NE(std::string(e.what()).find("SBUF capacity exceeded"),
              std::string::npos);
  }
  // One after the other they fit, and share memory.
  prog.erase(prog.begin() + 1);
  prog[1].src[0].buffer = 1;
  Program ok(bufs, prog, 1);
  EXPECT_EQ(ok.profile().sbuf_high_water, kF * 4);
}

TEST(NkiProgramTest, EnginesOverlapInTheEstimate) {
  // Independent loads and a compute on another tile overlap: the total is
  // less than the sum of the engines' busy times.
  const int64_t K = 128, M = 128, N = 512;
  Program prog(matmulBuffers(K, M, N), matmulProgram(K, M, N), 3);
  const Profile& p = prog.profile();
  double busy = 0;
  for (double b : p.busy_ns) busy += b;
  EXPECT_GT(p.busy_ns[static_cast<int>(Engine::kTensor)], 0);
  EXPECT_GT(p.total_ns, p.busy_ns[static_cast<int>(Engine::kDma)]);
  EXPECT_LT(p.busy_ns[static_cast<int>(Engine::kDma)], busy);
}

TEST(NkiDtypeTest, NarrowingRoundsToNearestEven) {
  EXPECT_EQ(floatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.00390625f)), 1.0f);  // tie to even
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.01171875f)), 1.015625f);
  EXPECT_EQ(f16ToFloat(floatToF16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(f16ToFloat(floatToF16(70000.0f))));
  EXPECT_EQ(f8e4m3fnToFloat(floatToF8e4m3fn(1000.0f)), 448.0f);  // saturates
  EXPECT_EQ(f8e4m3fnToFloat(floatToF8e4m3fn(0.3f)), 0.3125f);
  EXPECT_EQ(f8e5m2ToFloat(floatToF8e5m2(3.0f)), 3.0f);
  for (int v = 0; v < 256; ++v) {
    const float f = f8e4m3fnToFloat(static_cast<uint8_t>(v));
    if (!std::isnan(f)) EXPECT_EQ(floatToF8e4m3fn(f) & 0xff, v);
  }
}

// NKI's two E4M3 types: float8_e4m3fn (no inf, NaN S.1111.111, max 448) and
// the IEEE-style float8_e4m3 (S.1111.000 = ±inf, S.1111.xxx NaN, max 240).
// tests/test_nki_fp8_types.py checks both bit for bit against ml_dtypes.
TEST(NkiDtypeTest, TwoE4m3Types) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(std::string(dtypeName(DType::kF8E4M3FN)), "float8_e4m3fn");
  EXPECT_EQ(std::string(dtypeName(DType::kF8E4M3)), "float8_e4m3");
  EXPECT_EQ(static_cast<int>(DType::kF8E4M3FN), 3);  // records keep meaning
  EXPECT_TRUE(isFloat(DType::kF8E4M3) && isSigned(DType::kF8E4M3));
  EXPECT_EQ(elementSize(DType::kF8E4M3), 1);
  // Decoding the special codes.
  EXPECT_EQ(f8e4m3ToFloat(0x77), 240.0f);
  EXPECT_EQ(f8e4m3ToFloat(0x78), inf);
  EXPECT_EQ(f8e4m3ToFloat(0xf8), -inf);
  for (int v = 0x79; v <= 0x7f; ++v) {
    EXPECT_TRUE(std::isnan(f8e4m3ToFloat(static_cast<uint8_t>(v)))) << v;
    EXPECT_TRUE(std::isnan(f8e4m3ToFloat(static_cast<uint8_t>(v | 0x80))));
  }
  EXPECT_EQ(f8e4m3fnToFloat(0x78), 256.0f);
  EXPECT_EQ(f8e4m3fnToFloat(0x7e), 448.0f);
  EXPECT_TRUE(std::isnan(f8e4m3fnToFloat(0x7f)));
  EXPECT_EQ(f8e4m3ToFloat(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(f8e4m3ToFloat(0x08), std::ldexp(1.0f, -6));  // smallest normal
  // Every finite code converts back to itself (-0 included).
  for (int v = 0; v < 256; ++v) {
    const float f = f8e4m3ToFloat(static_cast<uint8_t>(v));
    if (std::isfinite(f)) EXPECT_EQ(floatToF8e4m3(f) & 0xff, v) << v;
  }
  // Round to nearest even; overflow and ±inf saturate to ±240; NaN is NaN.
  EXPECT_EQ(f8e4m3ToFloat(floatToF8e4m3(0.3f)), 0.3125f);
  EXPECT_EQ(floatToF8e4m3(1.0625f), 0x38);  // tie between 1 and 1.125: even
  EXPECT_EQ(floatToF8e4m3(1.1875f), 0x3a);  // tie between 1.125 and 1.25
  EXPECT_EQ(floatToF8e4m3(247.9f), 0x77);
  EXPECT_EQ(floatToF8e4m3(248.0f), 0x77);  // the tie with 256 saturates
  EXPECT_EQ(floatToF8e4m3(1000.0f), 0x77);
  EXPECT_EQ(floatToF8e4m3(-1000.0f), 0xf7);
  EXPECT_EQ(floatToF8e4m3(inf), 0x77);
  EXPECT_EQ(floatToF8e4m3(-inf), 0xf7);
  EXPECT_EQ(floatToF8e4m3fn(448.0f), 0x7e);
  EXPECT_EQ(floatToF8e4m3fn(inf), 0x7e);
  EXPECT_TRUE(std::isnan(f8e4m3ToFloat(floatToF8e4m3(std::nanf("")))));
  EXPECT_EQ(floatToF8e4m3(std::ldexp(1.0f, -10)), 0x00);  // tie to even 0
  EXPECT_EQ(floatToF8e4m3(std::ldexp(3.0f, -11)), 0x01);
  EXPECT_EQ(floatToF8e4m3(-std::ldexp(1.0f, -12)), 0x80);  // -0
  // A tile stored as one type and read back.
  const float in[4] = {240.0f, 300.0f, -0.0f, 0.1f};
  uint8_t buf[4];
  float out[4];
  storeRow(DType::kF8E4M3, buf, 1, 4, in);
  loadRow(DType::kF8E4M3, buf, 1, 4, out);
  EXPECT_EQ(out[0], 240.0f);
  EXPECT_EQ(out[1], 240.0f);
  EXPECT_TRUE(out[2] == 0.0f && std::signbit(out[2]));
  EXPECT_EQ(out[3], 0.1015625f);
  storeRow(DType::kF8E4M3FN, buf, 1, 4, in);
  loadRow(DType::kF8E4M3FN, buf, 1, 4, out);
  EXPECT_EQ(out[1], 288.0f);
}

namespace {

// dst = scan of x (multiply, add x) from the initial values in tile `init`:
// buffers 0 x [P, F], 1 init [P, 1], 2 out (arguments), 3..5 their tiles.
Program scanProgram(int64_t P, int64_t F, bool init_written) {
  std::vector<Buffer> bufs = {hbm(DType::kF32, P * F, 0, true),
                              hbm(DType::kF32, P, 1, true),
                              hbm(DType::kF32, P * F, 2, false),
                              tile(Space::kSbuf, DType::kF32, P, F),
                              tile(Space::kSbuf, DType::kF32, P, 1),
                              tile(Space::kSbuf, DType::kF32, P, F)};
  std::vector<Instruction> p;
  p.push_back(copy(Engine::kDma, access2d(3, 0, P, F, F, 1),
                   access2d(0, 0, P, F, F, 1)));
  if (init_written)
    p.push_back(copy(Engine::kDma, access2d(4, 0, P, 1, 1, 1),
                     access2d(1, 0, P, 1, 1, 1)));
  Instruction scan;
  scan.op = Op::kScan;
  scan.engine = Engine::kVector;
  scan.alu0 = Alu::kMultiply;
  scan.alu1 = Alu::kAdd;
  scan.flags = kFlagInitialTile;
  scan.dst = access2d(5, 0, P, F, F, 1);
  scan.src[0] = access2d(3, 0, P, F, F, 1);
  scan.src[1] = access2d(3, 0, P, F, F, 1);
  scan.src[2] = access2d(4, 0, P, 1, 1, 1);
  p.push_back(scan);
  p.push_back(copy(Engine::kDma, access2d(2, 0, P, F, F, 1),
                   access2d(5, 0, P, F, F, 1)));
  return Program(bufs, p, 3);
}

// out[P, N] = data[P, C] at the offsets of idx [P, K] (uint16), all loaded
// from arguments 0 data, 1 idx; 2 out.
Program gatherProgram(int64_t P, int64_t C, int64_t K, int64_t N) {
  std::vector<Buffer> bufs = {hbm(DType::kF32, P * C, 0, true),
                              hbm(DType::kU16, P * K, 1, true),
                              hbm(DType::kF32, P * N, 2, false),
                              tile(Space::kSbuf, DType::kF32, P, C),
                              tile(Space::kSbuf, DType::kU16, P, K),
                              tile(Space::kSbuf, DType::kF32, P, N)};
  std::vector<Instruction> p;
  p.push_back(copy(Engine::kDma, access2d(3, 0, P, C, C, 1),
                   access2d(0, 0, P, C, C, 1)));
  p.push_back(copy(Engine::kDma, access2d(4, 0, P, K, K, 1),
                   access2d(1, 0, P, K, K, 1)));
  Instruction g;
  g.op = Op::kGather;
  g.engine = Engine::kVector;
  g.loc = 7;
  g.dst = access2d(5, 0, P, N, N, 1);
  g.src[0] = access2d(3, 0, P, C, C, 1);
  g.src[1] = access2d(4, 0, P, K, K, 1);
  p.push_back(g);
  p.push_back(copy(Engine::kDma, access2d(2, 0, P, N, N, 1),
                   access2d(5, 0, P, N, N, 1)));
  return Program(bufs, p, 3);
}

}  // namespace

TEST(NkiProgramTest, ScanStartsFromATileOfInitialValues) {
  const int64_t P = 16, F = 5;
  const Program prog = scanProgram(P, F, true);
  std::vector<float> x(P * F), init(P), out(P * F, 0);
  for (int64_t k = 0; k < P * F; ++k) x[k] = 0.5f + 0.01f * k;
  for (int64_t p = 0; p < P; ++p) init[p] = static_cast<float>(p) - 3;
  void* ext[3] = {x.data(), init.data(), out.data()};
  prog.run(ext);
  for (int64_t p = 0; p < P; ++p) {
    float prev = init[p];
    for (int64_t j = 0; j < F; ++j) {
      prev = x[p * F + j] * prev + x[p * F + j];
      EXPECT_FLOAT_EQ(out[p * F + j], prev) << p << "," << j;
    }
  }
}

TEST(NkiProgramTest, ScanInitialTileIsCheckedLikeAnyOperand) {
  // Never written, and the scan's values reach the result.
  try {
    scanProgram(16, 4, false);
    FAIL() << "no error";
  } catch (const ProgramError& e) {
    EXPECT_NE(std::string(e.what()).find("never written ({buffer:4})"),
              std::string::npos)
        << e.what();
  }
}

TEST(NkiProgramTest, GatherReadsOffsetsPerGroupOfSixteenPartitions) {
  const int64_t P = 32, C = 10, K = 2, N = 20;
  const Program prog = gatherProgram(P, C, K, N);
  std::vector<float> data(P * C), out(P * N, -1);
  for (int64_t k = 0; k < P * C; ++k) data[k] = static_cast<float>(k);
  std::vector<uint16_t> idx(P * K);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t k = 0; k < K; ++k)
      idx[p * K + k] = static_cast<uint16_t>((p * 3 + k * 7) % C);
  void* ext[3] = {data.data(), idx.data(), out.data()};
  prog.run(ext);
  for (int64_t p = 0; p < P; ++p) {
    const int64_t g = p / 16 * 16;
    for (int64_t i = 0; i < N; ++i) {
      const int64_t off = idx[(g + i % 16) * K + i / 16];
      EXPECT_EQ(out[p * N + i], data[p * C + off]) << p << "," << i;
    }
  }
}

TEST(NkiProgramTest, GatherOffsetOutOfRangeIsAnErrorAtRunTime) {
  const Program prog = gatherProgram(16, 8, 1, 16);
  std::vector<float> data(16 * 8, 1), out(16 * 16, 0);
  std::vector<uint16_t> idx(16, 0);
  idx[3] = 8;  // one past the last column
  void* ext[3] = {data.data(), idx.data(), out.data()};
  try {
    prog.run(ext);
    FAIL() << "no error";
  } catch (const ProgramError& e) {
    EXPECT_EQ(e.loc(), 7);
    EXPECT_EQ(e.instruction(), 2);
    EXPECT_NE(std::string(e.what()).find("offset 8"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("8 columns"), std::string::npos);
  }
}

TEST(NkiProgramTest, GatherNeedsWholeGroupsAndEnoughOffsets) {
  EXPECT_THROW(gatherProgram(8, 4, 1, 4), ProgramError);    // 8 partitions
  EXPECT_THROW(gatherProgram(16, 4, 1, 17), ProgramError);  // 16 offsets
}

TEST(NkiProgramTest, DynamicDmaGathersOneRowPerPartition) {
  const int64_t R = 10, D = 3, K = 4;
  const Program prog = dynamicGatherProgram(R, D, K, true, false);
  std::vector<float> table(R * D), out(K * D, -1);
  for (int64_t k = 0; k < R * D; ++k) table[k] = static_cast<float>(k);
  std::vector<int32_t> idx = {9, 0, 9, 4};
  void* ext[3] = {table.data(), idx.data(), out.data()};
  prog.run(ext);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t j = 0; j < D; ++j)
      EXPECT_EQ(out[k * D + j], table[idx[k] * D + j]) << k << "," << j;
  // Each row is its own descriptor: dearer than the same bytes at once.
  const Program window = dynamicGatherProgram(R, D, K, false, false);
  EXPECT_GT(prog.profile().busy_ns[0], window.profile().busy_ns[0]);
}

TEST(NkiProgramTest, DynamicDmaIndexIsCheckedAgainstItsDimension) {
  const int64_t R = 10, D = 3, K = 4;
  const Program window = dynamicGatherProgram(R, D, K, false, false);
  std::vector<float> table(R * D, 1), out(K * D, 0);
  std::vector<int32_t> idx = {7, 0, 0, 0};  // rows 7..10: one past the end
  void* ext[3] = {table.data(), idx.data(), out.data()};
  try {
    window.run(ext);
    FAIL() << "no error";
  } catch (const ProgramError& e) {
    EXPECT_EQ(e.loc(), 9);
    EXPECT_EQ(e.instruction(), 1);
    EXPECT_NE(std::string(e.what()).find("index 7"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("positions 7..10"), std::string::npos)
        << e.what();
  }
  idx[0] = 6;  // rows 6..9 fit
  window.run(ext);
  EXPECT_EQ(out[0], 1);
  // Skipped rows keep what the tile held; the others move.
  const Program skip = dynamicGatherProgram(R, D, K, true, true);
  std::vector<int32_t> rows = {1, -1, 10, 2};
  void* ext2[3] = {table.data(), rows.data(), out.data()};
  EXPECT_NO_THROW(skip.run(ext2));
}
