// A cache of output metadata for the generic device-op path.
//
// Many operators' Meta kernels are Python functions (torch registers its
// Python meta kernels over the C++ ones), costing tens of microseconds per
// call. An op's output metadata is a function of its arguments' metadata and
// non-tensor values, so it is computed once per distinct signature — in a
// training loop, once per shape — and looked up afterwards.
#pragma once

#include <ATen/core/ivalue.h>

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

class MetaCacheKey {
 public:
  // Encodes the arguments; false if some argument cannot be encoded (the op
  // is then not cached).
  bool build(const void* op, const std::vector<c10::IValue>& args);
  const std::vector<int64_t>& words() const { return words_; }

  // Piecewise encoding, for callers with unboxed arguments.
  void start(const void* op);
  void addTensor(const at::Tensor& t);
  void addWord(int64_t w) { words_.push_back(w); }
  void addDouble(double d);
  void addScalar(const c10::Scalar& s);

 private:
  bool add(const c10::IValue& v);
  std::vector<int64_t> words_;
  std::vector<const void*> storages_;
};

// Thread-local, bounded: lookups take no lock.
const CachedMeta* findCachedMeta(const MetaCacheKey& key);
void storeCachedMeta(const MetaCacheKey& key, CachedMeta meta);

}  // namespace torch_neuronx
