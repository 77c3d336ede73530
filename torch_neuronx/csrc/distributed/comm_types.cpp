#include "distributed/comm_types.h"

#include <c10/util/Exception.h>

namespace torch_neuronx {

std::optional<CommElement> reducibleAs(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return CommElement{coll::DataType::kFloat32};
    case at::kDouble:
      return CommElement{coll::DataType::kFloat64};
    case at::kHalf:
      return CommElement{coll::DataType::kFloat16};
    case at::kBFloat16:
      return CommElement{coll::DataType::kBFloat16};
    case at::kChar:
      return CommElement{coll::DataType::kInt8};
    case at::kShort:
      return CommElement{coll::DataType::kInt16};
    case at::kInt:
      return CommElement{coll::DataType::kInt32};
    case at::kLong:
      return CommElement{coll::DataType::kInt64};
    case at::kByte:
      return CommElement{coll::DataType::kUInt8};
    case at::kBool:
      return CommElement{coll::DataType::kBool};
    case at::kComplexFloat:
      return CommElement{coll::DataType::kFloat32, 2};
    case at::kComplexDouble:
      return CommElement{coll::DataType::kFloat64, 2};
    case at::kComplexHalf:
      return CommElement{coll::DataType::kFloat16, 2};
    default:
      return std::nullopt;
  }
}

at::ScalarType scalarTypeOf(coll::DataType t) {
  switch (t) {
    case coll::DataType::kFloat32:
      return at::kFloat;
    case coll::DataType::kFloat64:
      return at::kDouble;
    case coll::DataType::kFloat16:
      return at::kHalf;
    case coll::DataType::kBFloat16:
      return at::kBFloat16;
    case coll::DataType::kInt8:
      return at::kChar;
    case coll::DataType::kInt16:
      return at::kShort;
    case coll::DataType::kInt32:
      return at::kInt;
    case coll::DataType::kInt64:
      return at::kLong;
    case coll::DataType::kUInt8:
      return at::kByte;
    case coll::DataType::kBool:
      return at::kBool;
  }
  return at::kByte;
}

coll::ReduceOp commReduceOp(const c10d::ReduceOp& op, at::ScalarType t) {
  const bool floating = at::isFloatingType(t) || at::isComplexType(t);
  const bool complex = at::isComplexType(t);
  auto unsupported = [&](const char* why) {
    C10_THROW_ERROR(DistBackendError,
                    c10::str("neuron backend: ", why, " (got dtype ", t, ")"));
  };
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return coll::ReduceOp::kSum;
    case c10d::ReduceOp::AVG:
      // Integers as NCCL: the sum, then a division truncating toward zero.
      if (t == at::kBool) unsupported("ReduceOp.AVG does not support bool");
      return coll::ReduceOp::kAvg;
    case c10d::ReduceOp::PREMUL_SUM:
      if (!floating)
        unsupported("ReduceOp.PREMUL_SUM supports floating-point dtypes only");
      if (complex)
        unsupported("ReduceOp.PREMUL_SUM does not support complex dtypes");
      return coll::ReduceOp::kPremulSum;
    case c10d::ReduceOp::PRODUCT:
      if (complex)
        unsupported("ReduceOp.PRODUCT does not support complex dtypes");
      return coll::ReduceOp::kProduct;
    case c10d::ReduceOp::MIN:
      if (complex) unsupported("ReduceOp.MIN does not support complex dtypes");
      return coll::ReduceOp::kMin;
    case c10d::ReduceOp::MAX:
      if (complex) unsupported("ReduceOp.MAX does not support complex dtypes");
      return coll::ReduceOp::kMax;
    case c10d::ReduceOp::BAND:
      if (floating)
        unsupported("ReduceOp.BAND supports integer and bool dtypes only");
      return coll::ReduceOp::kBand;
    case c10d::ReduceOp::BOR:
      if (floating)
        unsupported("ReduceOp.BOR supports integer and bool dtypes only");
      return coll::ReduceOp::kBor;
    case c10d::ReduceOp::BXOR:
      if (floating)
        unsupported("ReduceOp.BXOR supports integer and bool dtypes only");
      return coll::ReduceOp::kBxor;
    default:
      unsupported("this reduce op is not supported");
  }
  return coll::ReduceOp::kSum;  // unreachable
}

double premulDoubleFactor(const c10d::ReduceOp& op) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM || !op.supplement_) return 1.0;
  auto* s = static_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
  return s->tensor_factor.defined() ? 1.0 : s->double_factor;
}

std::optional<at::Tensor> premulTensorFactor(const c10d::ReduceOp& op) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM || !op.supplement_)
    return std::nullopt;
  auto* s = static_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
  if (!s->tensor_factor.defined()) return std::nullopt;
  return s->tensor_factor;
}

void divideForAverage(const at::Tensor& sum, int64_t ranks) {
  if (at::isIntegralType(sum.scalar_type(), /*includeBool=*/false))
    sum.div_(ranks, "trunc");
  else
    sum.div_(ranks);
}

}  // namespace torch_neuronx
