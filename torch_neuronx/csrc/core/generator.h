// The neuron random generator: the CPU's generator per device. Random ops on
// a neuron device draw from an at::CPUGeneratorImpl (mt19937 and its cached
// normal samples) with the CPU's own kernels, so after the same seed they
// draw exactly the numbers the CPU draws — the reason to develop on a
// simulator is that a run on neuron and a run on the CPU agree.
//
// The state, as TorchNeuron documents it and as DTensor's random module
// reads it, is 16 bytes: the uint64 seed, then the int64 offset — here the
// number of 32-bit words drawn from the seed's mt19937 stream. For a float32
// uniform_ (one word per element) and a contiguous normal_ of >= 16 float32
// elements, an offset of k words is where the k-th element of a draw would
// start: a DTensor shard drawn at its offset gets the numbers of its part of
// the whole tensor. Any (seed, offset) can be set: a state handed out by
// get_state() recently is restored exactly (a cached normal sample
// included); another is reached by advancing mt19937 from the nearest
// position this generator passed (with no cached normal sample).
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <ATen/core/MT19937RNGEngine.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <optional>

namespace torch_neuronx {

class NeuronGeneratorImpl final : public c10::GeneratorImpl {
 public:
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

  // The CPU generator random ops draw from. The caller holds mutex_ while a
  // kernel draws, then calls noteDrawn() with the engine as it was before.
  const at::Generator& cpuGenerator() const { return cpu_; }
  void noteDrawn(const at::mt19937_data_pod& before);

 private:
  NeuronGeneratorImpl* clone_impl() const override;
  at::CPUGeneratorImpl* cpu() const;
  // Moves to (seed, offset): see the file comment.
  void restore(uint64_t seed, uint64_t offset);
  void noteMilestone(uint64_t offset, const at::mt19937_data_pod& engine);

  struct Snapshot {
    uint64_t seed;
    uint64_t offset;
    at::mt19937_data_pod engine;
    std::optional<float> float_normal;
    std::optional<double> double_normal;
  };

  at::Generator cpu_;
  uint64_t offset_ = 0;
  // Engines of the current seed's stream passed on the way, one per
  // milestone_step_ words (the step doubles to keep at most kMaxMilestones):
  // restoring an offset advances from the nearest one below it.
  std::map<uint64_t, at::mt19937_data_pod> milestones_;
  uint64_t milestone_step_;
  // The states get_state() handed out last (exact restores), newest first.
  mutable std::list<Snapshot> recent_;
};

const at::Generator& defaultGenerator(c10::DeviceIndex device);
at::Generator makeGenerator(c10::DeviceIndex device);

// One random op's draw, on the host at the call: holds the neuron generator
// (`gen`, or the device's default one) so that the op's CPU kernel, given
// cpuGenerator(), draws the next numbers of the device's stream, in call
// order whatever the stream or the device queue is doing; counts what it
// drew when it ends. A generator of another device type is an error, as on
// CUDA; so is a draw while the current stream captures a graph (every replay
// would repeat the captured numbers).
class RandomDraw {
 public:
  RandomDraw(const std::optional<at::Generator>& gen, c10::DeviceIndex device);
  ~RandomDraw();
  RandomDraw(const RandomDraw&) = delete;
  RandomDraw& operator=(const RandomDraw&) = delete;

  const at::Generator& cpuGenerator() const { return impl_->cpuGenerator(); }

 private:
  at::Generator gen_;
  std::unique_lock<std::mutex> lock_;
  NeuronGeneratorImpl* impl_;
  at::mt19937_data_pod before_;
};

}  // namespace torch_neuronx
