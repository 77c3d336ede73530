// Error values and the exception type of the NeuronCore runtime.
//
// Errors the caller can cause or recover from (out of device memory, a bad
// configuration value) are reported as values or as neuron_rt::Error so that
// the layer above can turn them into its own exception types.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace neuron_rt {

enum class Status {
  kOk = 0,
  kOutOfMemory,
  kInvalidArgument,
  kInvalidConfig,
  kDeviceError,
  kForkedChild,
  // A collective between processes failed (a peer died or timed out, ranks
  // disagreed): the torch layer raises it as a DistBackendError.
  kCollectiveFailed,
  // Not allowed while the stream is capturing (a host wait, an event), or
  // a capture that such a call invalidated.
  kCaptureInvalid,
};

const char* statusName(Status s);

// Thrown by the runtime for configuration problems and misuse. Carries the
// Status so callers can map it to their own exception types.
class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  Status status() const { return status_; }

 private:
  Status status_;
};

// Thrown by a batch or a replayed graph (CapturedWork::run) when one of its
// steps fails: which step (its label and position, from 1) and what it threw,
// besides the message naming both ("<step> (step <index> of <item>): ...").
class StepError : public Error {
 public:
  StepError(Status status, std::string step, int index,
            std::string step_message, const std::string& message)
      : Error(status, message),
        step_(std::move(step)),
        index_(index),
        step_message_(std::move(step_message)) {}
  const std::string& step() const { return step_; }
  int index() const { return index_; }
  const std::string& stepMessage() const { return step_message_; }

 private:
  std::string step_;
  int index_;
  std::string step_message_;
};

// Thrown by an item that stands for the ops it runs — a part of an adaptive
// sequence replays the user's own eager ops — when one of them fails: the
// stream reports the failure as that op's own, as if it had run as an item
// of its own (the error's label is `op`, its message the op's).
class OpError : public Error {
 public:
  OpError(Status status, std::string op, const std::string& message)
      : Error(status, message), op_(std::move(op)) {}
  const std::string& op() const { return op_; }

 private:
  std::string op_;
};

}  // namespace neuron_rt
