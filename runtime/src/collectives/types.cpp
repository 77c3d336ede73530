#include "neuron_runtime/collectives/types.h"

namespace neuron_rt {
namespace collectives {

size_t dtypeSize(DataType t) {
  switch (t) {
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat16:
    case DataType::kBFloat16:
    case DataType::kInt16:
      return 2;
    case DataType::kInt8:
    case DataType::kUInt8:
    case DataType::kBool:
      return 1;
  }
  return 0;
}

const char* dtypeName(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kInt8:
      return "int8";
    case DataType::kInt16:
      return "int16";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kUInt8:
      return "uint8";
    case DataType::kBool:
      return "bool";
  }
  return "unknown dtype";
}

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "SUM";
    case ReduceOp::kProduct:
      return "PRODUCT";
    case ReduceOp::kMin:
      return "MIN";
    case ReduceOp::kMax:
      return "MAX";
    case ReduceOp::kBand:
      return "BAND";
    case ReduceOp::kBor:
      return "BOR";
    case ReduceOp::kBxor:
      return "BXOR";
    case ReduceOp::kAvg:
      return "AVG";
    case ReduceOp::kPremulSum:
      return "PREMUL_SUM";
  }
  return "unknown op";
}

bool isFloating(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 ||
         t == DataType::kFloat16 || t == DataType::kBFloat16;
}

const char* failureKindName(FailureKind k) {
  switch (k) {
    case FailureKind::kInvalidArgument:
      return "invalid argument";
    case FailureKind::kMismatch:
      return "mismatch between ranks";
    case FailureKind::kTimeout:
      return "timeout";
    case FailureKind::kPeerDied:
      return "peer died";
    case FailureKind::kAborted:
      return "aborted";
    case FailureKind::kSetup:
      return "setup failed";
  }
  return "unknown";
}

}  // namespace collectives
}  // namespace neuron_rt
