#include "neuron_runtime/status.h"

namespace neuron_rt {

const char* statusName(Status s) {
  switch (s) {
    case Status::kOk:
      return "ok";
    case Status::kOutOfMemory:
      return "out of memory";
    case Status::kInvalidArgument:
      return "invalid argument";
    case Status::kInvalidConfig:
      return "invalid configuration";
    case Status::kDeviceError:
      return "device error";
    case Status::kForkedChild:
      return "forked child";
    case Status::kCollectiveFailed:
      return "collective failed";
    case Status::kCaptureInvalid:
      return "operation not permitted when stream is capturing";
  }
  return "unknown";
}

}  // namespace neuron_rt
