// Error values and the exception type of the NeuronCore runtime.
//
// Errors the caller can cause or recover from (out of device memory, a bad
// configuration value) are reported as values or as neuron_rt::Error so that
// the layer above can turn them into its own exception types.
#pragma once

#include <stdexcept>
#include <string>

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

}  // namespace neuron_rt
