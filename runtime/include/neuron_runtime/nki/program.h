// A traced NKI kernel: the tile program the NeuronCore simulator checks,
// times and runs.
//
// The Python front end runs a kernel once per (shapes, dtypes, grid,
// constants) with every loop unrolled and every index concrete, and hands
// the result over as flat records (records.h): buffers (kernel arguments in
// HBM, tiles in SBUF/PSUM, HBM scratch) and instructions over affine access
// patterns of those buffers. Building a Program checks it (the checks that need
// the whole program: uninitialised reads, on-chip capacity of the live tiles),
// plans the memory of its internal buffers (liveness-based reuse, as the
// compiler allocates SBUF) and estimates its time on the engines
// (cost_model.h). run() executes it over given HBM addresses (interpreter.cpp).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "neuron_runtime/nki/dtype.h"

namespace neuron_rt {
namespace nki {

// One NeuronCore-v3.
constexpr int64_t kPartitions = 128;
// NeuronCore-v3's SBUF is 28 MiB ("The NeuronCore-v4 SBUF capacity is 32 MiB
// (up from 28 MiB in NeuronCore-v3)", the NKI Trainium3 architecture guide;
// the hardware table's trn2 sbuf_mib): 224 KiB per partition. 192 KiB is
// NeuronCore-v2's (24 MiB, trn1).
constexpr int64_t kSbufBytesPerPartition = 224 * 1024;
constexpr int64_t kPsumBanks = 8;
constexpr int64_t kPsumBankBytes = 2 * 1024;
constexpr int64_t kPsumBytesPerPartition = kPsumBanks * kPsumBankBytes;
constexpr int kMaxDims = 5;
// The physical cores one program may use: a logical NeuronCore (LNC=2 on
// trn2) has two; a multi-rank launch (nki.collectives) traces every rank's
// logical core into one program, ranks * LNC cores (up to 32 ranks at LNC=2).
constexpr int kMaxCores = 64;

enum class Space : uint8_t { kHbm = 0, kSbuf = 1, kPsum = 2 };
constexpr int kSpaces = 3;

struct Buffer {
  Space space = Space::kHbm;
  DType dtype = DType::kF32;
  int64_t elements = 0;
  // SBUF/PSUM: the partition count (first dimension) and the bytes each
  // partition holds. HBM: 0.
  int64_t partitions = 0;
  int64_t bytes_per_partition = 0;
  // >= 0: a kernel argument or result, the index of its address in run()'s
  // table. -1: internal (tile or HBM scratch), placed by the memory plan.
  int32_t external = -1;
  bool initialized = false;  // arguments: their values are defined
  int32_t loc = -1;          // where it was allocated (source location id)
  // The physical core of a logical core (LNC=2) whose SBUF/PSUM holds the
  // tile: each core's tiles count against its own memories. 0 otherwise.
  int32_t core = 0;
};

// Elements buffer.offset + sum(index[d] * stride[d]) for index < size.
// buffer == -1: no memory; an affine expression of the iteration indices
// (iota values, affine_select predicates), offset + sum(index * stride).
struct Access {
  int32_t buffer = -1;
  int32_t ndim = 0;
  int64_t offset = 0;
  int64_t size[kMaxDims] = {0, 0, 0, 0, 0};
  int64_t stride[kMaxDims] = {0, 0, 0, 0, 0};

  int64_t count() const {
    int64_t n = 1;
    for (int d = 0; d < ndim; ++d) n *= size[d];
    return n;
  }
};

enum class Engine : uint8_t {
  kDma = 0,
  kTensor = 1,
  kVector = 2,
  kScalar = 3,
  kGpSimd = 4,
};
constexpr int kEngines = 5;
const char* engineName(Engine e);

enum class Op : uint8_t {
  kCopy = 0,          // dst = src0 (DMA, tensor_copy, transposes by strides)
  kTensorTensor = 1,  // dst = alu0(src0, src1)
  kTensorScalar = 2,  // dst = alu1(alu0(src0, s0), s1); s: src1/src2 or imm
  kActivation = 3,    // dst = act(src0 * scale + bias)
  kReduce = 4,        // dst[keep] = alu0 over the trailing dims of src0
  kMatmul = 5,        // dst[M,N] (+)= src0[K,M]^T src1[K,N]
  kIota = 6,          // dst = src0 (an affine expression, buffer -1)
  kMemset = 7,        // dst = imm0
  kSelect = 8,        // dst = src0 != 0 ? src1 : src2
  kAffineSelect = 9,  // dst = alu0(src2 (affine), 0) ? src0 : imm0
  kBnStats = 10,      // dst[P,6] = (count, mean, M2, 0, 0, 0) of src0[P,F]
  kBnAggr = 11,       // dst[P,2] = (mean, var) of src0[P, 6k] stats
  // dst[:, j] = alu1(alu0(src0[:, j], dst[:, j-1]), src1[:, j]); dst[:, -1]
  // is imm0, or src2[:, 0] (a [P, 1] tile) with kFlagInitialTile.
  kScan = 12,
  kTranspose = 13,  // dst[F,P] = src0[P,F] (Tensor engine; dst in PSUM)
  // Tensor indirection (NeuronCore-v4): dst[p, i] = src0[p, offset(p, i)],
  // src0 the data tile [P, C], src1 the index tile [P, K] of column offsets
  // read at run time. Partitions form groups of 16; in the group starting
  // at partition g, offset(p, i) = src1[g + i % 16, i / 16]. An offset
  // outside [0, C) is a ProgramError raised by run().
  kGather = 14,
  // A DMA whose source (or destination, with kFlagDynamicDst) starts at an
  // element offset read at run time: dst = src0, with the dynamic side's
  // offset moved by index * imm[0] elements. src1 is the index: one value
  // (kFlagVectorOffset clear: a register-like scalar, NKI's dynamic slice
  // start) or one value per partition of the dynamic side ([P] access,
  // kFlagVectorOffset: NKI's indirect DMA, a gather or a scatter of rows).
  // imm[1] is the size of the indexed dimension, imm[2] / imm[3] the lowest
  // and highest position of it the static access reaches relative to the
  // index, and `keep` the dimension's number (for messages). An index with
  // index + imm[2] < 0 or index + imm[3] >= imm[1] is a ProgramError raised
  // by run() (a skipped row or transfer with kFlagOobSkip).
  kDmaDynamic = 15,
  // The Vector engine's search instructions, each over the free elements of
  // one partition at a time (a partition's free dims flattened row-major, in
  // fp32), for every partition of dst:
  // nki.isa.max8: dst[p, 0:8] = the 8 largest of src0[p, :], descending
  // (duplicates kept; NaN ranks above every number).
  kMax8 = 16,
  // nki.isa.nc_find_index8: dst[p, i] = the position in src0[p, :] of the
  // value src1[p, i] (8 per partition). Values are matched in the order
  // i = 0..7, each taking the first equal position no earlier value took
  // (equal values take successive positions, ascending); a value left
  // without a position gets all ones (kSearchNotFound) of dst's type.
  kFindIndex8 = 17,
  // nki.isa.nc_match_replace8: dst = src0 with the positions matched by the
  // 8 values src1[p, :] set to imm[0]. Values are matched as in kFindIndex8
  // but in the order i = 7..0 (equal values take successive positions,
  // descending across i). src2, when it has a buffer, is a second
  // destination: the matched positions, as kFindIndex8 writes them.
  kMatchReplace8 = 18,
  // nki.isa.nonzero_with_count (GpSimd): for the partitions p = 0, 16, 32,
  // ... (each GpSimd core's first) of dst[P, T + 1], the positions k +
  // imm[0] of the elements src0[p, k] != 0 (T free elements) in order, then
  // imm[1] up to position T - 1, then the count at position T. The other
  // partitions of dst are not written.
  kNonzeroWithCount = 19,
  // Random numbers (Vector engine). A run draws from one stream of values:
  // value k is a counter-based hash of (the run's key, k) (tile_math.h
  // randomBits), so the values depend on nothing but the key and the
  // program. A run starts at position 0 of a fresh key (no two runs alike,
  // as the hardware's generator); the random ops take positions in program
  // order, each dst's in row-major order of its shape.
  // nki.language.random_seed: the stream restarts at position 0 of the key
  // of a 32-bit seed: the word src0 holds (a one-element tile of a 4-byte
  // type, read when it runs: its bits, whatever the type), or imm[0] with
  // kFlagOperand0Imm. It has no destination (dst has no buffer).
  kRandomSeed = 20,
  // nki.language.rand: dst = uniform values in [0, 1), k / 2^b for b the
  // significant bits of dst's float type (24 for fp32), so that none rounds
  // to 1.
  kRandom = 21,
  // nki.isa.dropout: dst = u < prob ? 0 : src0, u the next uniform value
  // (fp32, 24 bits) for each element, prob src1 (a per-partition tile
  // broadcast along the free dims) or imm[0] with kFlagOperand0Imm. The
  // kept elements are unchanged (no rescaling; bit for bit when dst has
  // src0's type); prob 0 keeps all, 1 drops all.
  kDropout = 22,
  // MX (microscaling) numbers, NeuronCore-v4 (mx.h). Groups of 32 values,
  // 8 partitions x 4 values of one packed element, share an E8M0 scale (a
  // uint8 exponent, 2^(s - 127)); the scale of the group of partitions
  // 8g..8g+7 sits at partition (g / 4) * 32 + g % 4 of the scale tile (its
  // quadrant's first rows).
  // nki.isa.quantize_mx (Vector): dst[P, F] fp8 x4 = src0[P, 4F] (bf16/fp16;
  // element j of dst packs src0's 4j..4j+3, free dims row-major) divided by
  // the group's scale, saturated and rounded to nearest even; src2 is the
  // second destination, the uint8 scales (F per partition).
  kQuantizeMx = 23,
  // nki.isa.nc_matmul_mx, in two records as the Tensor engine loads its
  // stationary matrix before streaming the moving one: kMxLoadStationary
  // (no destination) takes src0 [K, M] x4 and its scales src1 (M per
  // partition) for the next kMatmulMx of the same core, which computes
  // dst[M, N] (+)= sum over k, q of stationary[k, m, q] * moving[k, n, q],
  // src0 the moving [K, N] x4 and src1 its scales.
  kMxLoadStationary = 24,
  kMatmulMx = 25,
  // A copy of bits between element types (bitcast.h): row r of dst (dim 0;
  // its free elements row-major, their bytes in order) = row r of src0, as
  // many bytes a row on each side. NKI's `t.ap(..., dtype=X)` views move
  // through it. imm[0] = 1: a view's reinterpretation, free (the hardware
  // reads the memory as X without moving it).
  kRawCopy = 26,
  // Run-time control flow (control_flow.h): the engine sequencers' scalar
  // registers (NKI's register_* and NkiScalar) and branches (dynamic_range /
  // fori_loop / while_loop / if_else). A register holds an integer; a run
  // starts with none written, and reading one never written is a
  // ProgramError.
  // kScalar: reg[keep] = alu0(a, b), kBypass: a. a is the one-element
  // access src0 when it has a buffer (register_load / scalar_load), else
  // reg[imm[0]], or the constant imm[0] with kFlagOperand0Imm; b is
  // reg[imm[1]], or imm[1] with kFlagOperand1Imm. imm[2] is the width the
  // value wraps to (kScalarInt32 / kScalarUint32 / kScalarInt64). keep = -1:
  // no register destination. dst, when it has a buffer, is a one-element
  // access the result is also written to (register_store / scalar_store).
  // imm[3]: the physical core whose sequencers run it (LNC=2; the cost
  // model's), as kBranch's imm[1].
  kScalar = 27,
  // kBranch: the next instruction is imm[0] when alu0(reg[keep], 0) holds
  // (kEqual: the register is zero, kNotEqual: nonzero), always with kBypass;
  // else the next one. A branch backwards closes a loop: the instructions
  // from its target to it are the loop's body.
  kBranch = 28,
};
constexpr int kOps = static_cast<int>(Op::kBranch) + 1;
// kScalar's widths (imm[2]): NKI's scalar dtypes int32, uint32, int64.
constexpr int kScalarInt32 = 0;
constexpr int kScalarUint32 = 1;
constexpr int kScalarInt64 = 2;
// Partitions that share the offsets of a tensor indirection.
constexpr int64_t kIndirectionGroup = 16;
// Values per partition of max8 / nc_find_index8 / nc_match_replace8.
constexpr int64_t kSearchValues = 8;
// The index those write for a value they do not find: all ones of the
// destination's type (0xFFFFFFFF for uint32).
constexpr int64_t kSearchNotFound = -1;
// SBUF partitions per GpSimd core: nonzero_with_count reads and writes the
// first partition of each group this size.
constexpr int64_t kGpSimdCorePartitions = 16;

enum class Alu : uint8_t {
  kBypass = 0,
  kAdd,
  kSubtract,
  kMultiply,
  kDivide,
  kMax,
  kMin,
  kPow,
  kMod,
  kEqual,
  kNotEqual,
  kGreater,
  kGreaterEqual,
  kLess,
  kLessEqual,
  kLogicalAnd,
  kLogicalOr,
  kLogicalXor,
  kBitwiseAnd,
  kBitwiseOr,
  kBitwiseXor,
  kLeftShift,
  kRightShift,
  kAbsMax,
  kCount,
};

enum class Act : uint8_t {
  kIdentity = 0,
  kExp,
  kLog,
  kTanh,
  kSigmoid,
  kRelu,
  kGelu,
  kGeluTanh,
  kSilu,
  kSqrt,
  kRsqrt,
  kReciprocal,
  kSquare,
  kAbs,
  kNegative,
  kSign,
  kSin,
  kCos,
  kErf,
  kSoftplus,
  kMish,
  kArctan,
  kCeil,
  kFloor,
  kRound,
  kTrunc,
  kExp2,
  kLog2,
  kTan,
  kGeluDx,
  kSiluDx,
  kCount,
};

// Instruction flags.
constexpr uint32_t kFlagAccumulate = 1;   // matmul: add into dst (PSUM)
constexpr uint32_t kFlagReverse0 = 2;     // tensor_scalar: s0 op x
constexpr uint32_t kFlagReverse1 = 4;     // tensor_scalar: s1 op x
constexpr uint32_t kFlagOperand0Imm = 8;  // tensor_scalar s0 / activation scale
constexpr uint32_t kFlagOperand1Imm = 16;  // tensor_scalar s1 / activation bias
constexpr uint32_t kFlagNegate = 32;       // reduce: negate the result
constexpr uint32_t kFlagInitialTile = 64;  // scan: initial values in src2
constexpr uint32_t kFlagDynamicDst = 128;  // dma_dynamic: the index moves dst
constexpr uint32_t kFlagVectorOffset = 256;  // dma_dynamic: one per partition
constexpr uint32_t kFlagOobSkip = 512;       // dma_dynamic: skip, do not fail
// A DMA (copy, or tensor_tensor with a reduction) that is one transfer of a
// collective between ranks (nki.collectives): costed on its rank's
// collective channel, not its HBM DMA queues (collective_cost.h; imm holds
// the algorithm's steps, the LNC and the bytes scale).
constexpr uint32_t kFlagCollective = 1u << 20;

struct Instruction {
  Op op = Op::kCopy;
  Engine engine = Engine::kVector;
  Alu alu0 = Alu::kBypass;
  Alu alu1 = Alu::kBypass;
  Act act = Act::kIdentity;
  uint32_t flags = 0;
  int32_t loc = -1;  // source location id (the front end maps it to file:line)
  int32_t keep = 0;  // reduce: leading dims of src0 kept in dst
  Access dst;
  Access src[3];
  double imm[4] = {0, 0, 0, 0};
};

// Per-kernel estimate of the cost model.
struct Profile {
  double total_ns = 0;
  double busy_ns[kEngines] = {0, 0, 0, 0, 0};
  int64_t instructions[kEngines] = {0, 0, 0, 0, 0};
  int64_t dma_bytes = 0;
  int64_t matmul_flops = 0;
  int64_t sbuf_high_water = 0;  // bytes per partition
  int64_t psum_high_water = 0;  // bytes per partition
};

// A check the program failed: which instruction (or buffer) and why.
class ProgramError : public std::runtime_error {
 public:
  ProgramError(int32_t loc, int64_t instruction, const std::string& what)
      : std::runtime_error(what), loc_(loc), instruction_(instruction) {}
  int32_t loc() const { return loc_; }
  int64_t instruction() const { return instruction_; }

 private:
  int32_t loc_;
  int64_t instruction_;
};

class Program {
 public:
  // Checks the program (throws ProgramError), plans its memory and
  // estimates its cost. `externals`: number of HBM argument addresses run()
  // takes.
  Program(std::vector<Buffer> buffers, std::vector<Instruction> instructions,
          int32_t externals);

  // Executes over the external buffers' addresses (externals() of them),
  // on the calling thread. Thread-safe: each call uses its own scratch.
  // Throws ProgramError for what only the data decides (a tensor
  // indirection offset or a dynamic DMA index out of range); the
  // instructions before it ran.
  void run(void* const* external_addresses) const;
  // The same, appending to `path` the index of each instruction executed,
  // in order (a program with loops repeats its body's): what the cost model
  // times for the run (control_flow.h).
  void run(void* const* external_addresses, std::vector<int32_t>* path) const;

  const Profile& profile() const { return profile_; }
  int32_t externals() const { return externals_; }
  const std::vector<Buffer>& buffers() const { return buffers_; }
  const std::vector<Instruction>& instructions() const { return instructions_; }
  // Bytes of scratch memory (tiles, HBM scratch) one run uses.
  int64_t scratchBytes() const { return scratch_bytes_; }

 private:
  void checkStructure() const;
  void planMemory();

  std::vector<Buffer> buffers_;
  std::vector<Instruction> instructions_;
  int32_t externals_;
  std::vector<int64_t> scratch_offset_;  // per internal buffer, bytes
  int64_t scratch_bytes_ = 0;
  Profile profile_;

  friend class Interpreter;
};

}  // namespace nki
}  // namespace neuron_rt
