// Which operators ran on the device, and which needed a host round trip.
// torch_neuronx.get_executed_ops() / get_fallback_ops() read these.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace torch_neuronx {

void noteExecuted(const std::string& op_name);
// Cheap form for hot paths: records the op unless `seen` already equals the
// current generation (bumped by clearOpStats()).
void noteExecutedOnce(const char* op_name, std::atomic<uint32_t>& seen);
// Records a host round-trip op; warns once per op.
void noteFallback(const std::string& op_name, const std::string& why);

std::vector<std::string> executedOps();
std::vector<std::string> fallbackOps();
void clearOpStats();

}  // namespace torch_neuronx
