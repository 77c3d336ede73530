#include "core/generator.h"

#include <ATen/Utils.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <deque>
#include <random>

#include "core/device.h"
#include "core/stream.h"

namespace torch_neuronx {
namespace {

using Engine = at::mt19937_data_pod;
constexpr int kN = at::MERSENNE_STATE_N;
constexpr int kM = at::MERSENNE_STATE_M;

// The state bytes: uint64 seed, int64 offset.
constexpr int64_t kStateBytes = 16;
// Exact states kept for set_state (~2.5 KB each): one per activation
// checkpoint outstanding in a step is the common use.
constexpr size_t kMaxSnapshots = 256;
// Milestones: restoring an offset advances at most milestone_step_ words
// (4M words, a few ms) from the one below it.
constexpr uint64_t kFirstMilestoneStep = uint64_t{1} << 22;
constexpr size_t kMaxMilestones = 1024;
// More words than any run draws: a count that gets here means the engine was
// not advanced by draws from `before` (a bug), not a long loop.
constexpr uint64_t kMaxWordsPerDraw = uint64_t{1} << 44;

// The mt19937 recurrence: the next 624 words of the state (the standard
// algorithm, as at::mt19937 computes it when its words run out).
// Three loops without a modulo, so that the compiler vectorises them:
// counting a draw's words regenerates the state once per 624 words drawn.
inline uint32_t mixed(uint32_t a, uint32_t b, uint32_t m) {
  const uint32_t y = (a & at::UMASK) | (b & at::LMASK);
  return m ^ (y >> 1) ^ ((0u - (y & 1u)) & at::MATRIX_A);
}

void regenerate(std::array<uint32_t, kN>& s) {
  int i = 0;
  for (; i < kN - kM; ++i) s[i] = mixed(s[i], s[i + 1], s[i + kM]);
  for (; i < kN - 1; ++i) s[i] = mixed(s[i], s[i + 1], s[i + kM - kN]);
  s[kN - 1] = mixed(s[kN - 1], s[0], s[kM - 1]);
}

// at::mt19937's operator() decrements left_ and regenerates when it reaches
// zero, then reads word next_: the engine after its `left_`-th call is the
// regenerated state with left_ = N, next_ = 1.
void stepThroughRegeneration(Engine& e) {
  regenerate(e.state_);
  e.left_ = kN;
  e.next_ = 1;
}

// `e` advanced by `words` calls; `milestone` sees each regenerated engine and
// the words drawn to reach it.
template <typename F>
void advance(Engine& e, uint64_t words, F&& milestone) {
  while (words > 0) {
    if (words < static_cast<uint64_t>(e.left_)) {
      e.left_ -= static_cast<int>(words);
      e.next_ += static_cast<uint32_t>(words);
      return;
    }
    words -= static_cast<uint64_t>(e.left_);
    stepThroughRegeneration(e);
    milestone(words, e);
  }
}

// How many calls took `before` to `after` (the same stream, `after` later).
template <typename F>
uint64_t wordsBetween(Engine before, const Engine& after, F&& milestone) {
  uint64_t words = 0;
  while (true) {
    if (before.state_ == after.state_ && after.left_ <= before.left_)
      return words + static_cast<uint64_t>(before.left_ - after.left_);
    words += static_cast<uint64_t>(before.left_);
    stepThroughRegeneration(before);
    milestone(words, before);
    TORCH_INTERNAL_ASSERT(words < kMaxWordsPerDraw,
                          "neuron generator: a draw left the CPU generator "
                          "outside its stream");
  }
}

Engine seededEngine(uint64_t seed) { return at::mt19937(seed).data(); }

}  // namespace

NeuronGeneratorImpl::NeuronGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : c10::GeneratorImpl(neuronDevice(device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      cpu_(at::make_generator<at::CPUGeneratorImpl>(seed)),
      milestone_step_(kFirstMilestoneStep) {}

at::CPUGeneratorImpl* NeuronGeneratorImpl::cpu() const {
  return cpu_.get<at::CPUGeneratorImpl>();
}

void NeuronGeneratorImpl::set_current_seed(uint64_t seed) {
  cpu()->set_current_seed(seed);  // also drops the cached normal samples
  offset_ = 0;
  milestones_.clear();
  milestone_step_ = kFirstMilestoneStep;
}

void NeuronGeneratorImpl::set_offset(uint64_t offset) {
  restore(current_seed(), offset);
}

uint64_t NeuronGeneratorImpl::get_offset() const { return offset_; }
uint64_t NeuronGeneratorImpl::current_seed() const {
  return cpu()->current_seed();
}

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
  TORCH_CHECK(new_state.numel() == kStateBytes, "neuron RNG state must have ",
              kStateBytes, " bytes (uint64 seed, int64 offset), got ",
              new_state.numel());
  uint64_t seed;
  int64_t offset;
  const char* p = static_cast<const char*>(new_state.data());
  std::memcpy(&seed, p, 8);
  std::memcpy(&offset, p + 8, 8);
  TORCH_CHECK(offset >= 0, "invalid neuron RNG state: offset ", offset,
              " is negative");
  restore(seed, static_cast<uint64_t>(offset));
}

c10::intrusive_ptr<c10::TensorImpl> NeuronGeneratorImpl::get_state() const {
  auto state =
      at::detail::empty_cpu({kStateBytes}, c10::ScalarType::Byte, std::nullopt,
                            std::nullopt, std::nullopt, std::nullopt);
  char* p = static_cast<char*>(state.data_ptr());
  const uint64_t seed = current_seed();
  const int64_t offset = static_cast<int64_t>(offset_);
  std::memcpy(p, &seed, 8);
  std::memcpy(p + 8, &offset, 8);
  // Remembered exactly, so that restoring it (fork_rng, an activation
  // checkpoint's recomputation) draws the same numbers again.
  for (auto it = recent_.begin(); it != recent_.end(); ++it)
    if (it->seed == seed && it->offset == offset_) {
      recent_.erase(it);
      break;
    }
  recent_.push_front({seed, offset_, cpu()->engine().data(),
                      cpu()->next_float_normal_sample(),
                      cpu()->next_double_normal_sample()});
  if (recent_.size() > kMaxSnapshots) recent_.pop_back();
  return state.getIntrusivePtr();
}

void NeuronGeneratorImpl::noteMilestone(uint64_t offset, const Engine& engine) {
  if (offset / milestone_step_ == 0) return;  // the seed's start is one
  if (milestones_.empty() ||
      milestones_.rbegin()->first / milestone_step_ < offset / milestone_step_)
    milestones_.emplace(offset, engine);
  if (milestones_.size() <= kMaxMilestones) return;
  milestone_step_ *= 2;  // keep the first of each wider interval
  uint64_t last = 0;
  for (auto it = milestones_.begin(); it != milestones_.end();) {
    const uint64_t bucket = it->first / milestone_step_;
    if (bucket == 0 || bucket == last) {
      it = milestones_.erase(it);
    } else {
      last = bucket;
      ++it;
    }
  }
}

void NeuronGeneratorImpl::noteDrawn(const Engine& before) {
  const Engine after = cpu()->engine().data();
  const uint64_t start = offset_;
  offset_ += wordsBetween(before, after, [&](uint64_t words, const Engine& e) {
    noteMilestone(start + words, e);
  });
}

void NeuronGeneratorImpl::restore(uint64_t seed, uint64_t offset) {
  at::CPUGeneratorImpl* g = cpu();
  if (seed == current_seed() && offset == offset_) return;
  for (const Snapshot& s : recent_)
    if (s.seed == seed && s.offset == offset) {
      if (seed != current_seed()) {  // the milestones were another stream's
        milestones_.clear();
        milestone_step_ = kFirstMilestoneStep;
      }
      at::mt19937 engine;
      engine.set_data(s.engine);
      g->set_engine(engine);
      g->set_next_float_normal_sample(s.float_normal);
      g->set_next_double_normal_sample(s.double_normal);
      offset_ = offset;
      return;
    }
  // The nearest known position at or below `offset` in this seed's stream:
  // the current one, a milestone, or the seed's start.
  Engine from;
  uint64_t from_offset = 0;
  if (seed != current_seed()) {
    set_current_seed(seed);
    from = g->engine().data();
  } else if (offset >= offset_) {
    from = g->engine().data();
    from_offset = offset_;
  } else {
    auto it = milestones_.upper_bound(offset);
    if (it != milestones_.begin()) {
      --it;
      from = it->second;
      from_offset = it->first;
    } else {
      from = seededEngine(seed);
    }
  }
  advance(from, offset - from_offset, [&](uint64_t left, const Engine& e) {
    noteMilestone(offset - left, e);
  });
  at::mt19937 engine;
  engine.set_data(from);
  g->set_engine(engine);
  g->set_next_float_normal_sample(std::nullopt);
  g->set_next_double_normal_sample(std::nullopt);
  offset_ = offset;
}

NeuronGeneratorImpl* NeuronGeneratorImpl::clone_impl() const {
  auto* g = new NeuronGeneratorImpl(device().index());
  g->cpu_ = cpu_.clone();
  g->offset_ = offset_;
  g->milestones_ = milestones_;
  g->milestone_step_ = milestone_step_;
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

RandomDraw::RandomDraw(const std::optional<at::Generator>& gen,
                       c10::DeviceIndex device)
    : gen_(gen.has_value() && gen->defined() ? *gen
                                             : defaultGenerator(device)) {
  // CUDA's message for a generator of another device type.
  TORCH_CHECK(gen_.device().type() == c10::DeviceType::PrivateUse1,
              "Expected a 'neuron' device type for generator but found '",
              gen_.device().type(), "'");
  TORCH_CHECK(!runtimeStream(currentStream(device)).capturing(),
              "neuron graphs: random ops cannot be captured (their numbers "
              "are drawn when they are queued, so every replay would repeat "
              "them); run them outside the captured region");
  lock_ = std::unique_lock<std::mutex>(gen_.mutex());
  impl_ = gen_.get<NeuronGeneratorImpl>();
  before_ = impl_->cpuGenerator().get<at::CPUGeneratorImpl>()->engine().data();
}

RandomDraw::~RandomDraw() { impl_->noteDrawn(before_); }

}  // namespace torch_neuronx
