// The flat records a traced kernel arrives in, and the names the front end
// knows their codes by.
//
// The Python front end (torch_neuronx/nki) records a kernel as int64 words
// per buffer and per instruction, plus four doubles of immediates per
// instruction. This header is the one statement of that layout: buildProgram
// reads it, and the front end takes the word order, the codes and the names
// from the _C binding (_nki_layout) instead of restating them.
#pragma once

#include <cstdint>

#include "neuron_runtime/nki/program.h"

namespace neuron_rt {
namespace nki {

// The words of a buffer record, in order.
enum BufferWord : int {
  kBufferSpace,
  kBufferDtype,
  kBufferElements,
  kBufferPartitions,
  kBufferBytesPerPartition,
  kBufferExternal,
  kBufferInitialized,
  kBufferLoc,
  kBufferCore,
  kBufferWords,
};

// An instruction record: these header words, then four accesses (dst,
// src[0], src[1], src[2]).
enum InstructionWord : int {
  kInstructionOp,
  kInstructionEngine,
  kInstructionAlu0,
  kInstructionAlu1,
  kInstructionAct,
  kInstructionFlags,
  kInstructionLoc,
  kInstructionKeep,
  kInstructionHeaderWords,
};
constexpr int kInstructionAccesses = 4;

// An access: buffer, ndim, offset, then kMaxDims sizes and kMaxDims strides.
enum AccessWord : int {
  kAccessBuffer,
  kAccessNdim,
  kAccessOffset,
  kAccessSizes,
  kAccessStrides = kAccessSizes + kMaxDims,
  kAccessWords = kAccessStrides + kMaxDims,
};

constexpr int kInstructionWords =
    kInstructionHeaderWords + kInstructionAccesses * kAccessWords;
constexpr int kImmediates = 4;  // doubles per instruction

// What the front end calls each word (field names, in word order).
extern const char* const kBufferFieldNames[kBufferWords];
extern const char* const kInstructionFieldNames[kInstructionHeaderWords];
// The accesses of an instruction record, in order.
extern const char* const kInstructionAccessNames[kInstructionAccesses];

// A named group of consecutive words of an access record.
struct AccessField {
  const char* name;
  int first_word;
  int words;
};
constexpr int kAccessFields = 5;
extern const AccessField kAccessFieldLayout[kAccessFields];

// The front end's names of the codes in the records.
const char* opRecordName(Op op);  // as nki/language.py emits it ("matmul")
const char* aluName(Alu a);       // NKI's names ("maximum", "fmod")
const char* actName(Act f);       // NKI's names ("gelu_apprx_tanh")
const char* spaceName(Space s);   // "hbm", "sbuf", "psum"

struct FlagName {
  const char* name;
  uint32_t flag;
};
constexpr int kFlagNames = 11;
extern const FlagName kFlagNameTable[kFlagNames];

// Builds (and so checks: Program's constructor) a Program from records.
Program buildProgram(const int64_t* buffer_words, int64_t num_buffers,
                     const int64_t* instruction_words, const double* immediates,
                     int64_t num_instructions, int32_t externals);

// The records of a built program's buffers and instructions: what
// buildProgram read (the front end's tests compare them to what it meant).
void encodeBuffer(const Buffer& b, int64_t* words);
void encodeInstruction(const Instruction& in, int64_t* words,
                       double* immediates);

}  // namespace nki
}  // namespace neuron_rt
