// A cache of output metadata for the generic device-op path.
//
// Many operators' Meta kernels are Python functions (torch registers its
// Python meta kernels over the C++ ones), costing tens of microseconds per
// call. An op's output metadata is a function of its arguments' metadata and
// non-tensor values, so it is computed once per distinct signature — in a
// training loop, once per shape — and looked up afterwards.
#pragma once

#include <ATen/core/ivalue.h>
#include <neuron_runtime/fnv1a.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace torch_neuronx {

// What the Meta kernel said about one returned tensor.
struct TensorMeta {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t storage_offset = 0;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool defined = true;
  int base = -1;  // views: index (in flattened tensor arguments) of the base
};

// Per return: a single tensor or a list of them.
struct CachedMeta {
  std::vector<std::vector<TensorMeta>> returns;
};

// Which facts about the arguments a key encodes.
enum class KeyKind {
  // Everything the output metadata depends on: geometry and values.
  kMeta,
  // An argument signature (first_call_validation.h): dtypes, ranks, memory
  // overlap, integer/bool/string values — no sizes, strides or
  // floating-point values, which vary from call to call in a training loop.
  kSignature,
};

class MetaCacheKey {
 public:
  // Encodes the arguments; false if some argument cannot be encoded (the op
  // is then not cached).
  bool build(const void* op, const std::vector<c10::IValue>& args,
             KeyKind kind = KeyKind::kMeta);
  const std::vector<int64_t>& words() const { return words_; }

  // Piecewise encoding, for callers with unboxed arguments.
  void start(const void* op, KeyKind kind = KeyKind::kMeta);
  void addTensor(const at::Tensor& t);
  void addWord(int64_t w) { words_.push_back(w); }
  void addDouble(double d);
  void addScalar(const c10::Scalar& s);

 private:
  bool add(const c10::IValue& v);
  std::vector<int64_t> words_;
  std::vector<const void*> storages_;
  bool signature_ = false;
};

// Hash of a key's words, for containers keyed by them.
struct KeyWordsHash {
  size_t operator()(const std::vector<int64_t>& w) const {
    return static_cast<size_t>(neuron_rt::fnv1aWords(w));
  }
};

// Thread-local, bounded: lookups take no lock.
const CachedMeta* findCachedMeta(const MetaCacheKey& key);
void storeCachedMeta(const MetaCacheKey& key, CachedMeta meta);
void forgetCachedMeta(const MetaCacheKey& key);

}  // namespace torch_neuronx
