// The neuron random generator: counter-based, a 64-bit seed and a 64-bit
// offset. Each random op takes the (seed, offset) pair at launch time on the
// host and advances the offset, so its values depend only on the seed and on
// how many random ops ran before it — not on timing or on other streams. The
// state tensor is 16 bytes: the uint64 seed, then the int64 offset.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <mutex>
#include <optional>
#include <utility>

namespace torch_neuronx {

class NeuronGeneratorImpl final : public c10::GeneratorImpl {
 public:
  // Offsets advance in steps of 4 (the Philox counter width), the layout
  // DTensor's random module expects.
  static constexpr uint64_t kOffsetStep = 4;

  explicit NeuronGeneratorImpl(c10::DeviceIndex device,
                               uint64_t seed = c10::default_rng_seed_val);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // Returns the (seed, offset) for one random op and advances the offset.
  std::pair<uint64_t, uint64_t> claim();

 private:
  NeuronGeneratorImpl* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

const at::Generator& defaultGenerator(c10::DeviceIndex device);
at::Generator makeGenerator(c10::DeviceIndex device);

// A CPU generator whose stream is a pure function of (seed, offset); device
// work items draw from it.
at::Generator cpuGeneratorFor(uint64_t seed, uint64_t offset);

// The CPU generator one random op on `device` draws from: claims a (seed,
// offset) pair from `gen` (a neuron generator; undefined means the device's
// default one) on the host at launch time, so the values do not depend on
// when the work item runs. A generator of another device type is an error,
// as on CUDA.
at::Generator launchGenerator(const std::optional<at::Generator>& gen,
                              c10::DeviceIndex device);

}  // namespace torch_neuronx
