// Element types, reduction operators and the error type of the host-local
// collectives. Collectives work on raw memory, so these enums are all the
// type information they get; the backend maps its own dtypes onto them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "neuron_runtime/status.h"

namespace neuron_rt {
namespace collectives {

enum class DataType : uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kUInt8,
  kBool,  // one byte, 0 or 1 (any non-zero byte reads as true)
};

enum class ReduceOp : uint8_t {
  kSum,        // bool: logical or (as torch.sum semantics for gloo/NCCL)
  kProduct,    // bool: logical and
  kMin,        // floats: NaN propagates
  kMax,        // floats: NaN propagates
  kBand,       // integers and bool only
  kBor,        // integers and bool only
  kBxor,       // integers and bool only
  kAvg,        // sum, then divide by world size (integers: truncating, as
               // NCCL); not bool
  kPremulSum,  // floating types only: sum of (input * factor)
};

size_t dtypeSize(DataType t);
const char* dtypeName(DataType t);
const char* reduceOpName(ReduceOp op);
bool isFloating(DataType t);

// Why a collective failed. Everything but kMismatch and kInvalidArgument
// leaves the communicator unusable (a peer may be half-way through a
// collective); a mismatch is seen by every rank at the same step, so the
// communicator stays usable after it.
enum class FailureKind : uint8_t {
  kInvalidArgument,  // bad arguments on this rank (nothing was exchanged)
  kMismatch,         // ranks called different collectives / sizes
  kTimeout,          // peers did not arrive within the timeout
  kPeerDied,         // a peer process exited while we waited for it
  kAborted,          // some rank called abort() or failed fatally
  kSetup,            // shared memory could not be created or joined
};

const char* failureKindName(FailureKind k);

// Thrown by every collective call. It is a neuron_rt::Error (status
// kInvalidArgument for kInvalidArgument/kMismatch, kDeviceError otherwise),
// so the backend can map it like any other runtime error; `ranks()` names
// the ranks at fault (those that did not arrive, died, or disagree).
class CollectiveError : public Error {
 public:
  CollectiveError(FailureKind kind, const std::string& message,
                  std::vector<int> ranks = {})
      : Error(kind == FailureKind::kInvalidArgument ||
                      kind == FailureKind::kMismatch
                  ? Status::kInvalidArgument
                  : Status::kDeviceError,
              message),
        kind_(kind),
        ranks_(std::move(ranks)) {}
  FailureKind kind() const { return kind_; }
  const std::vector<int>& ranks() const { return ranks_; }
  // True if the communicator can still be used after this error.
  bool recoverable() const {
    return kind_ == FailureKind::kInvalidArgument ||
           kind_ == FailureKind::kMismatch;
  }

 private:
  FailureKind kind_;
  std::vector<int> ranks_;
};

}  // namespace collectives
}  // namespace neuron_rt
