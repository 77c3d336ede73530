#include "neuron_runtime/topology.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>

#include "neuron_runtime/status.h"

namespace neuron_rt {
namespace {

[[noreturn]] void badConfig(const std::string& what, const std::string& value,
                            const std::string& expected) {
  throw Error(Status::kInvalidConfig,
              "invalid " + what + "='" + value + "': expected " + expected);
}

bool parseInt(const std::string& s, long long& out) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  if (s.size() > 18) return false;
  out = std::stoll(s);
  return true;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

const char* getenvOrNull(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

}  // namespace

std::vector<int> parseCoreList(const std::string& text, int limit,
                               const std::string& what) {
  const std::string expected =
      "a list of core ids or ranges such as '0-1', '2' or '0,3', each below " +
      std::to_string(limit);
  std::set<int> ids;
  size_t start = 0;
  if (trim(text).empty()) badConfig(what, text, expected);
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string part = trim(text.substr(
        start, comma == std::string::npos ? std::string::npos : comma - start));
    long long lo = 0, hi = 0;
    size_t dash = part.find('-');
    if (dash == std::string::npos) {
      if (!parseInt(part, lo)) badConfig(what, text, expected);
      hi = lo;
    } else if (!parseInt(trim(part.substr(0, dash)), lo) ||
               !parseInt(trim(part.substr(dash + 1)), hi) || hi < lo) {
      badConfig(what, text, expected);
    }
    if (hi >= limit) badConfig(what, text, expected);
    for (long long i = lo; i <= hi; ++i) ids.insert(static_cast<int>(i));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return {ids.begin(), ids.end()};
}

uint64_t parseByteSize(const std::string& text, const std::string& what) {
  const std::string expected =
      "a positive byte count, optionally with a unit (KiB, MiB, GiB, e.g. "
      "'512MiB')";
  std::string s = trim(text);
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  long long n = 0;
  if (!parseInt(s.substr(0, i), n) || n <= 0) badConfig(what, text, expected);
  std::string unit = trim(s.substr(i));
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  uint64_t mult = 1;
  if (unit.empty() || unit == "b") {
    mult = 1;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    mult = 1ull << 10;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    mult = 1ull << 20;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    mult = 1ull << 30;
  } else if (unit == "t" || unit == "tb" || unit == "tib") {
    mult = 1ull << 40;
  } else {
    badConfig(what, text, expected);
  }
  if (static_cast<uint64_t>(n) > (UINT64_MAX / mult))
    badConfig(what, text, expected);
  return static_cast<uint64_t>(n) * mult;
}

TopologyConfig Topology::configFromEnv() {
  TopologyConfig c;
  if (const char* v = getenvOrNull("TORCH_NEURONX_NUM_CHIPS")) {
    long long n = 0;
    if (!parseInt(trim(v), n) || n < 1 || n > 64)
      badConfig("TORCH_NEURONX_NUM_CHIPS", v, "an integer from 1 to 64");
    c.num_chips = static_cast<int>(n);
  }
  if (const char* v = getenvOrNull("NEURON_LOGICAL_NC_CONFIG")) {
    std::string s = trim(v);
    if (s != "1" && s != "2")
      badConfig("NEURON_LOGICAL_NC_CONFIG", v, "1 or 2");
    c.logical_core_size = s == "1" ? 1 : 2;
  }
  const uint64_t chip_hbm = 96ull << 30;
  c.hbm_bytes_per_core =
      chip_hbm / (c.physical_cores_per_chip / c.logical_core_size);
  if (const char* v = getenvOrNull("TORCH_NEURONX_HBM_BYTES_PER_CORE")) {
    c.hbm_bytes_per_core = parseByteSize(v, "TORCH_NEURONX_HBM_BYTES_PER_CORE");
    if (c.hbm_bytes_per_core > (1ull << 40))
      badConfig("TORCH_NEURONX_HBM_BYTES_PER_CORE", v, "at most 1TiB per core");
  }
  const int total =
      c.num_chips * (c.physical_cores_per_chip / c.logical_core_size);
  if (const char* v = getenvOrNull("NEURON_RT_VISIBLE_CORES"))
    c.visible_cores = parseCoreList(v, total, "NEURON_RT_VISIBLE_CORES");
  // The Neuron runtime's other way to size a process: a number of cores, not
  // which ones. It reserves the first free cores; in a simulation every core
  // is free, so those are the first n. It only counts, so
  // NEURON_RT_VISIBLE_CORES, which names the cores, wins when both are set.
  if (const char* v = getenvOrNull("NEURON_RT_NUM_CORES")) {
    long long n = 0;
    if (!parseInt(trim(v), n) || n > total)
      badConfig("NEURON_RT_NUM_CORES", v,
                "a number of cores from 0 (all) to " + std::to_string(total));
    if (n > 0 && c.visible_cores.empty())
      for (int i = 0; i < n; ++i) c.visible_cores.push_back(i);
  }
  return c;
}

Topology::Topology(const TopologyConfig& config) : config_(config) {
  if (config_.num_chips < 1 || config_.logical_core_size < 1 ||
      config_.physical_cores_per_chip % config_.logical_core_size != 0)
    throw Error(Status::kInvalidConfig, "invalid topology configuration");
  std::vector<int> ids = config_.visible_cores;
  if (ids.empty())
    for (int i = 0; i < totalLogicalCores(); ++i) ids.push_back(i);
  for (int id : ids) {
    if (id < 0 || id >= totalLogicalCores())
      throw Error(Status::kInvalidConfig,
                  "visible core " + std::to_string(id) + " does not exist");
    cores_.push_back(CoreInfo{static_cast<int>(cores_.size()), id,
                              id / logicalCoresPerChip(),
                              config_.hbm_bytes_per_core});
  }
}

int Topology::logicalCoresPerChip() const {
  return config_.physical_cores_per_chip / config_.logical_core_size;
}

int Topology::totalLogicalCores() const {
  return config_.num_chips * logicalCoresPerChip();
}

}  // namespace neuron_rt
