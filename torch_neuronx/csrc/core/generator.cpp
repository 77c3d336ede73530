#include "core/generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Utils.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <random>

#include "core/device.h"
#include "core/stream.h"

namespace torch_neuronx {

NeuronGeneratorImpl::NeuronGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(neuronDevice(device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      seed_(seed) {}

void NeuronGeneratorImpl::set_current_seed(uint64_t seed) {
  seed_ = seed;
  offset_ = 0;
}

void NeuronGeneratorImpl::set_offset(uint64_t offset) {
  TORCH_CHECK(offset % kOffsetStep == 0, "neuron generator offset must be a ",
              "multiple of ", kOffsetStep, ", got ", offset);
  offset_ = offset;
}

uint64_t NeuronGeneratorImpl::get_offset() const { return offset_; }
uint64_t NeuronGeneratorImpl::current_seed() const { return seed_; }

uint64_t NeuronGeneratorImpl::seed() {
  uint64_t s = (static_cast<uint64_t>(std::random_device{}()) << 32) ^
               std::random_device{}();
  set_current_seed(s);
  return s;
}

void NeuronGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>() &&
                  new_state.device().is_cpu(),
              "neuron RNG state must be a CPU torch.ByteTensor, got ",
              new_state.dtype(), " on ", new_state.device());
  TORCH_CHECK(new_state.numel() == 16,
              "neuron RNG state must have 16 bytes (uint64 seed, int64 "
              "offset), got ",
              new_state.numel());
  uint64_t seed;
  int64_t offset;
  const char* p = static_cast<const char*>(new_state.data());
  std::memcpy(&seed, p, 8);
  std::memcpy(&offset, p + 8, 8);
  TORCH_CHECK(offset >= 0 && offset % kOffsetStep == 0,
              "invalid neuron RNG state: offset ", offset,
              " is not a non-negative multiple of ", kOffsetStep);
  seed_ = seed;
  offset_ = static_cast<uint64_t>(offset);
}

c10::intrusive_ptr<c10::TensorImpl> NeuronGeneratorImpl::get_state() const {
  auto state = at::detail::empty_cpu({16}, c10::ScalarType::Byte, std::nullopt,
                                     std::nullopt, std::nullopt, std::nullopt);
  char* p = static_cast<char*>(state.data_ptr());
  int64_t offset = static_cast<int64_t>(offset_);
  std::memcpy(p, &seed_, 8);
  std::memcpy(p + 8, &offset, 8);
  return state.getIntrusivePtr();
}

std::pair<uint64_t, uint64_t> NeuronGeneratorImpl::claim() {
  std::pair<uint64_t, uint64_t> r{seed_, offset_};
  offset_ += kOffsetStep;
  return r;
}

NeuronGeneratorImpl* NeuronGeneratorImpl::clone_impl() const {
  auto* g = new NeuronGeneratorImpl(device().index(), seed_);
  g->offset_ = offset_;
  return g;
}

const at::Generator& defaultGenerator(c10::DeviceIndex device) {
  static std::once_flag once;
  static std::deque<at::Generator> gens;
  std::call_once(once, [] {
    for (c10::DeviceIndex i = 0; i < deviceCount(); ++i)
      gens.push_back(at::make_generator<NeuronGeneratorImpl>(i));
  });
  if (device < 0) device = currentDevice();
  checkDeviceIndex(device);
  return gens[device];
}

at::Generator makeGenerator(c10::DeviceIndex device) {
  if (device < 0) device = currentDevice();
  checkDeviceIndex(device);
  return at::make_generator<NeuronGeneratorImpl>(device);
}

at::Generator cpuGeneratorFor(uint64_t seed, uint64_t offset) {
  // splitmix64 of (seed, offset): nearby offsets give unrelated streams.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (offset / 4 + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return at::detail::createCPUGenerator(z);
}

}  // namespace torch_neuronx

namespace torch_neuronx {

at::Generator launchGenerator(const std::optional<at::Generator>& gen,
                              c10::DeviceIndex device) {
  // A copy: at::Generator is a shared handle, and mutex() is non-const.
  at::Generator g =
      gen.has_value() && gen->defined() ? *gen : defaultGenerator(device);
  // CUDA's message for a generator of another device type.
  TORCH_CHECK(g.device().type() == c10::DeviceType::PrivateUse1,
              "Expected a 'neuron' device type for generator but found '",
              g.device().type(), "'");
  // A captured op would draw the same numbers at every replay.
  TORCH_CHECK(!runtimeStream(currentStream(device)).capturing(),
              "neuron graphs: random ops cannot be captured (their generator "
              "state is taken when they are queued, so every replay would "
              "draw the same numbers); run them outside the captured region");
  std::pair<uint64_t, uint64_t> so;
  {
    std::lock_guard<std::mutex> lock(g.mutex());
    so = g.get<NeuronGeneratorImpl>()->claim();
  }
  return cpuGeneratorFor(so.first, so.second);
}

}  // namespace torch_neuronx
