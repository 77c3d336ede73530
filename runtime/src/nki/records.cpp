#include "neuron_runtime/nki/records.h"

#include <string>
#include <utility>
#include <vector>

namespace neuron_rt {
namespace nki {

static_assert(sizeof(Instruction::imm) / sizeof(double) == kImmediates,
              "the record carries every immediate of an instruction");

const char* const kBufferFieldNames[kBufferWords] = {
    "space",    "dtype",       "elements", "partitions", "bytes_per_partition",
    "external", "initialized", "loc",      "core"};

const char* const kInstructionFieldNames[kInstructionHeaderWords] = {
    "op", "engine", "alu0", "alu1", "act", "flags", "loc", "keep"};

const char* const kInstructionAccessNames[kInstructionAccesses] = {
    "dst", "src0", "src1", "src2"};

const AccessField kAccessFieldLayout[kAccessFields] = {
    {"buffer", kAccessBuffer, 1},         {"ndim", kAccessNdim, 1},
    {"offset", kAccessOffset, 1},         {"size", kAccessSizes, kMaxDims},
    {"stride", kAccessStrides, kMaxDims},
};

const FlagName kFlagNameTable[kFlagNames] = {
    {"accumulate", kFlagAccumulate},      {"reverse0", kFlagReverse0},
    {"reverse1", kFlagReverse1},          {"operand0_imm", kFlagOperand0Imm},
    {"operand1_imm", kFlagOperand1Imm},   {"negate", kFlagNegate},
    {"initial_tile", kFlagInitialTile},   {"dynamic_dst", kFlagDynamicDst},
    {"vector_offset", kFlagVectorOffset}, {"oob_skip", kFlagOobSkip},
    {"collective", kFlagCollective},
};

const char* opRecordName(Op op) {
  static const char* const names[kOps] = {"copy",
                                          "tensor_tensor",
                                          "tensor_scalar",
                                          "activation",
                                          "reduce",
                                          "matmul",
                                          "iota",
                                          "memset",
                                          "select",
                                          "affine_select",
                                          "bn_stats",
                                          "bn_aggr",
                                          "scan",
                                          "transpose",
                                          "gather",
                                          "dma_dynamic",
                                          "max8",
                                          "find_index8",
                                          "match_replace8",
                                          "nonzero_with_count",
                                          "random_seed",
                                          "rand",
                                          "dropout",
                                          "quantize_mx",
                                          "mx_load_stationary",
                                          "matmul_mx",
                                          "raw_copy"};
  // Control flow's codes sit apart from the contiguous ones (program.h);
  // codes no op has yet are "?".
  if (op == Op::kScalar) return "scalar";
  if (op == Op::kBranch) return "branch";
  const int k = static_cast<int>(op);
  return k < kOps && names[k] ? names[k] : "?";
}

const char* aluName(Alu a) {
  static const char* const names[static_cast<int>(Alu::kCount)] = {
      "bypass",      "add",        "subtract",      "multiply",    "divide",
      "maximum",     "minimum",    "power",         "fmod",        "equal",
      "not_equal",   "greater",    "greater_equal", "less",        "less_equal",
      "logical_and", "logical_or", "logical_xor",   "bitwise_and", "bitwise_or",
      "bitwise_xor", "left_shift", "right_shift",   "abs_max"};
  const int k = static_cast<int>(a);
  return k < static_cast<int>(Alu::kCount) ? names[k] : "?";
}

const char* actName(Act f) {
  static const char* const names[static_cast<int>(Act::kCount)] = {
      "copy",    "exp",     "log",      "tanh",
      "sigmoid", "relu",    "gelu",     "gelu_apprx_tanh",
      "silu",    "sqrt",    "rsqrt",    "reciprocal",
      "square",  "abs",     "negative", "sign",
      "sin",     "cos",     "erf",      "softplus",
      "mish",    "arctan",  "ceil",     "floor",
      "round",   "trunc",   "exp2",     "log2",
      "tan",     "gelu_dx", "silu_dx"};
  const int k = static_cast<int>(f);
  return k < static_cast<int>(Act::kCount) ? names[k] : "?";
}

const char* spaceName(Space s) {
  static const char* const names[kSpaces] = {"hbm", "sbuf", "psum"};
  const int k = static_cast<int>(s);
  return k < kSpaces ? names[k] : "?";
}

namespace {

void decodeAccess(const int64_t* w, Access& a) {
  a.buffer = static_cast<int32_t>(w[kAccessBuffer]);
  a.ndim = static_cast<int32_t>(w[kAccessNdim]);
  a.offset = w[kAccessOffset];
  for (int d = 0; d < kMaxDims; ++d) {
    a.size[d] = w[kAccessSizes + d];
    a.stride[d] = w[kAccessStrides + d];
  }
}

void encodeAccess(const Access& a, int64_t* w) {
  w[kAccessBuffer] = a.buffer;
  w[kAccessNdim] = a.ndim;
  w[kAccessOffset] = a.offset;
  for (int d = 0; d < kMaxDims; ++d) {
    w[kAccessSizes + d] = a.size[d];
    w[kAccessStrides + d] = a.stride[d];
  }
}

// Access k of an instruction record (kInstructionAccessNames).
const Access& accessOf(const Instruction& in, int k) {
  return k == 0 ? in.dst : in.src[k - 1];
}
Access& accessOf(Instruction& in, int k) {
  return k == 0 ? in.dst : in.src[k - 1];
}

}  // namespace

Program buildProgram(const int64_t* bw, int64_t num_buffers, const int64_t* iw,
                     const double* imm, int64_t num_instructions,
                     int32_t externals) {
  std::vector<Buffer> buffers(static_cast<size_t>(num_buffers));
  for (int64_t b = 0; b < num_buffers; ++b) {
    const int64_t* w = bw + b * kBufferWords;
    Buffer& buf = buffers[b];
    if (w[kBufferSpace] < 0 || w[kBufferSpace] >= kSpaces ||
        w[kBufferDtype] < 0 ||
        w[kBufferDtype] >= static_cast<int64_t>(DType::kCount))
      throw ProgramError(static_cast<int32_t>(w[kBufferLoc]), -1,
                         "malformed buffer {buffer:" + std::to_string(b) + "}");
    buf.space = static_cast<Space>(w[kBufferSpace]);
    buf.dtype = static_cast<DType>(w[kBufferDtype]);
    buf.elements = w[kBufferElements];
    buf.partitions = w[kBufferPartitions];
    buf.bytes_per_partition = w[kBufferBytesPerPartition];
    buf.external = static_cast<int32_t>(w[kBufferExternal]);
    buf.initialized = w[kBufferInitialized] != 0;
    buf.loc = static_cast<int32_t>(w[kBufferLoc]);
    if (w[kBufferCore] < 0 || w[kBufferCore] >= kMaxCores)
      throw ProgramError(buf.loc, -1,
                         "buffer {buffer:" + std::to_string(b) +
                             "} is on core " + std::to_string(w[kBufferCore]) +
                             " (a program has at most " +
                             std::to_string(kMaxCores) + ")");
    buf.core = static_cast<int32_t>(w[kBufferCore]);
  }
  std::vector<Instruction> instructions(static_cast<size_t>(num_instructions));
  for (int64_t i = 0; i < num_instructions; ++i) {
    const int64_t* w = iw + i * kInstructionWords;
    Instruction& in = instructions[i];
    in.op = static_cast<Op>(w[kInstructionOp]);
    in.engine = static_cast<Engine>(w[kInstructionEngine]);
    in.alu0 = static_cast<Alu>(w[kInstructionAlu0]);
    in.alu1 = static_cast<Alu>(w[kInstructionAlu1]);
    in.act = static_cast<Act>(w[kInstructionAct]);
    in.flags = static_cast<uint32_t>(w[kInstructionFlags]);
    in.loc = static_cast<int32_t>(w[kInstructionLoc]);
    in.keep = static_cast<int32_t>(w[kInstructionKeep]);
    for (int k = 0; k < kInstructionAccesses; ++k)
      decodeAccess(w + kInstructionHeaderWords + k * kAccessWords,
                   accessOf(in, k));
    for (int k = 0; k < kImmediates; ++k) in.imm[k] = imm[i * kImmediates + k];
  }
  return Program(std::move(buffers), std::move(instructions), externals);
}

void encodeBuffer(const Buffer& b, int64_t* w) {
  w[kBufferSpace] = static_cast<int64_t>(b.space);
  w[kBufferDtype] = static_cast<int64_t>(b.dtype);
  w[kBufferElements] = b.elements;
  w[kBufferPartitions] = b.partitions;
  w[kBufferBytesPerPartition] = b.bytes_per_partition;
  w[kBufferExternal] = b.external;
  w[kBufferInitialized] = b.initialized ? 1 : 0;
  w[kBufferLoc] = b.loc;
  w[kBufferCore] = b.core;
}

void encodeInstruction(const Instruction& in, int64_t* w, double* imm) {
  w[kInstructionOp] = static_cast<int64_t>(in.op);
  w[kInstructionEngine] = static_cast<int64_t>(in.engine);
  w[kInstructionAlu0] = static_cast<int64_t>(in.alu0);
  w[kInstructionAlu1] = static_cast<int64_t>(in.alu1);
  w[kInstructionAct] = static_cast<int64_t>(in.act);
  w[kInstructionFlags] = in.flags;
  w[kInstructionLoc] = in.loc;
  w[kInstructionKeep] = in.keep;
  for (int k = 0; k < kInstructionAccesses; ++k)
    encodeAccess(accessOf(in, k),
                 w + kInstructionHeaderWords + k * kAccessWords);
  for (int k = 0; k < kImmediates; ++k) imm[k] = in.imm[k];
}

}  // namespace nki
}  // namespace neuron_rt
