// Simulated hardware topology: chips, physical NeuronCores, logical cores.
//
// A Trn2-like chip has 8 physical NeuronCores and 96 GiB of HBM. With the
// default logical-core config (LNC=2) two physical cores form one logical
// core, so one chip exposes 4 logical cores with 24 GiB each. The layer above
// sees only the visible logical cores, numbered 0..N-1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace neuron_rt {

struct TopologyConfig {
  int num_chips = 1;
  int physical_cores_per_chip = 8;
  int logical_core_size = 2;  // LNC: physical cores per logical core
  uint64_t hbm_bytes_per_core = 24ull << 30;
  // Logical core ids (across all chips) that are visible; empty = all.
  std::vector<int> visible_cores;
};

struct CoreInfo {
  int index;         // visible index (what neuron:<index> means)
  int logical_core;  // global logical core id
  int chip;
  uint64_t hbm_bytes;
};

class Topology {
 public:
  explicit Topology(const TopologyConfig& config);

  // Reads NEURON_RT_VISIBLE_CORES, NEURON_RT_NUM_CORES,
  // NEURON_LOGICAL_NC_CONFIG, TORCH_NEURONX_NUM_CHIPS and
  // TORCH_NEURONX_HBM_BYTES_PER_CORE. Throws neuron_rt::Error(kInvalidConfig)
  // with a message naming the variable.
  static TopologyConfig configFromEnv();

  // The platform the chips are, as the Neuron runtime names an instance's
  // (TorchNeuron's device properties carry it): every simulated chip is a
  // Trainium2.
  static const char* platform() { return "trn2"; }

  int numVisibleCores() const { return static_cast<int>(cores_.size()); }
  int logicalCoresPerChip() const;
  int totalLogicalCores() const;
  const CoreInfo& core(int index) const { return cores_.at(index); }
  const TopologyConfig& config() const { return config_; }

 private:
  TopologyConfig config_;
  std::vector<CoreInfo> cores_;
};

// Parsers shared with tests. Throw neuron_rt::Error(kInvalidConfig).
// "0-1", "2", "0,3", "0-1,3" -> sorted unique ids; every id < limit.
std::vector<int> parseCoreList(const std::string& text, int limit,
                               const std::string& what);
// "1073741824", "512MiB", "24GiB", "2GB" (GB is taken as GiB), "64KiB".
uint64_t parseByteSize(const std::string& text, const std::string& what);

}  // namespace neuron_rt
