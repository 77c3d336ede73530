// Helpers shared by the runtime tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <future>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "neuron_runtime/sequence_adapter.h"
#include "neuron_runtime/status.h"

namespace neuron_rt_test {

// Adaptive eager on for the test's scope (threshold 2, fresh counters), off
// again afterwards.
struct AdaptiveOn {
  AdaptiveOn() {
    auto& settings = neuron_rt::adaptiveSettings();
    settings.enabled = true;
    settings.threshold = 2;
    settings.max_fruitless_windows = 64;
    settings.max_fruitless_adaptations = 8;
    settings.max_sequences = 16;
    settings.chunk_items = 64;
    neuron_rt::resetAdaptiveStats();
  }
  ~AdaptiveOn() { neuron_rt::adaptiveSettings().enabled = false; }
};

// A one-shot gate that work items can block on. Items must capture waiter()
// (a shared_future, by value) rather than the Gate itself: if a test fails
// early and the Gate is destroyed unopened, the promise breaks, the future
// becomes ready, and blocked items (and stream destructors) do not hang.
// Declare gates after the streams that use them, so they die first.
class Gate {
 public:
  Gate() : future_(promise_.get_future().share()) {}
  ~Gate() { open(); }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  void open() {
    if (!opened_) {
      opened_ = true;
      promise_.set_value();
    }
  }
  std::shared_future<void> waiter() const { return future_; }

 private:
  std::promise<void> promise_;
  std::shared_future<void> future_;
  bool opened_ = false;
};

// Saves the given environment variables, unsets them, and restores the saved
// values on destruction. set()/unset() should only touch guarded names.
class EnvGuard {
 public:
  explicit EnvGuard(std::vector<std::string> names) {
    for (auto& n : names) {
      const char* v = std::getenv(n.c_str());
      saved_.emplace_back(n, v ? std::optional<std::string>(v) : std::nullopt);
      unsetenv(n.c_str());
    }
  }
  ~EnvGuard() {
    for (auto& [name, value] : saved_) {
      if (value)
        setenv(name.c_str(), value->c_str(), 1);
      else
        unsetenv(name.c_str());
    }
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

  void set(const std::string& name, const std::string& value) {
    setenv(name.c_str(), value.c_str(), 1);
  }
  void unset(const std::string& name) { unsetenv(name.c_str()); }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

inline const std::vector<std::string>& runtimeEnvVars() {
  static const std::vector<std::string> vars = {
      "NEURON_RT_VISIBLE_CORES", "NEURON_LOGICAL_NC_CONFIG",
      "TORCH_NEURONX_NUM_CHIPS", "TORCH_NEURONX_HBM_BYTES_PER_CORE",
      "NEURON_RT_NUM_CORES"};
  return vars;
}

// Succeeds if f() throws neuron_rt::Error with `status` and a message that
// contains every string in `substrings`.
inline ::testing::AssertionResult ThrowsError(
    const std::function<void()>& f, neuron_rt::Status status,
    const std::vector<std::string>& substrings = {}) {
  try {
    f();
  } catch (const neuron_rt::Error& e) {
    if (e.status() != status)
      return ::testing::AssertionFailure()
             << "threw status '" << neuron_rt::statusName(e.status())
             << "', expected '" << neuron_rt::statusName(status)
             << "'; message: " << e.what();
    for (const auto& sub : substrings)
      if (std::string(e.what()).find(sub) == std::string::npos)
        return ::testing::AssertionFailure()
               << "message '" << e.what() << "' does not contain '" << sub
               << "'";
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure()
           << "threw a non-neuron_rt::Error exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

}  // namespace neuron_rt_test
