#include "eager/meta_cache.h"

#include <c10/core/DefaultDtype.h>

#include <cstring>
#include <functional>
#include <unordered_map>

namespace torch_neuronx {
namespace {

constexpr size_t kMaxEntries = 8192;

enum Tag : int64_t {
  kNone = 1,
  kTensor,
  kUndefinedTensor,
  kInt,
  kDouble,
  kBool,
  kString,
  kIntList,
  kDoubleList,
  kBoolList,
  kTensorList,
  kOptTensorList,
  kDevice,
  kGenerator,
  kComplex,
  kSymbolic,
};

int64_t bitsOf(double d) {
  int64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

using Cache =
    std::unordered_map<std::vector<int64_t>, CachedMeta, KeyWordsHash>;

Cache& cache() {
  thread_local Cache c;
  return c;
}

}  // namespace

void MetaCacheKey::addTensor(const at::Tensor& t) {
  if (!t.defined()) {
    words_.push_back(kUndefinedTensor);
    return;
  }
  words_.push_back(kTensor);
  words_.push_back(static_cast<int64_t>(t.scalar_type()));
  words_.push_back(static_cast<int64_t>(t.device().type()) * 1024 +
                   t.device().index());
  words_.push_back(t.unsafeGetTensorImpl()->is_wrapped_number());
  words_.push_back(t.dim());
  if (signature_) {
    // Whether elements overlap (an expanded output is an error).
    words_.push_back(t.is_non_overlapping_and_dense());
  } else {
    for (int64_t s : t.sizes()) words_.push_back(s);
    for (int64_t s : t.strides()) words_.push_back(s);
    words_.push_back(t.storage_offset());
  }
  // Which earlier argument shares this tensor's storage (aliasing changes
  // what Meta kernels return: views, overlap errors).
  const void* s = t.storage().unsafeGetStorageImpl();
  int64_t same = -1;
  for (size_t i = 0; i < storages_.size(); ++i)
    if (storages_[i] == s) same = static_cast<int64_t>(i);
  storages_.push_back(s);
  words_.push_back(same);
}

bool MetaCacheKey::add(const c10::IValue& v) {
  if (v.isNone()) {
    words_.push_back(kNone);
  } else if (v.isTensor()) {
    addTensor(v.toTensor());
  } else if (v.isInt()) {
    words_.push_back(kInt);
    words_.push_back(v.toInt());
  } else if (v.isDouble()) {
    words_.push_back(kDouble);
    if (!signature_) words_.push_back(bitsOf(v.toDouble()));
  } else if (v.isBool()) {
    words_.push_back(kBool);
    words_.push_back(v.toBool());
  } else if (v.isComplexDouble()) {
    auto c = v.toComplexDouble();
    words_.push_back(kComplex);
    if (!signature_) {
      words_.push_back(bitsOf(c.real()));
      words_.push_back(bitsOf(c.imag()));
    }
  } else if (v.isString()) {
    words_.push_back(kString);
    words_.push_back(
        static_cast<int64_t>(std::hash<std::string_view>{}(v.toStringView())));
  } else if (v.isIntList()) {
    words_.push_back(kIntList);
    auto l = v.toIntList();
    words_.push_back(static_cast<int64_t>(l.size()));
    for (int64_t x : l) words_.push_back(x);
  } else if (v.isDoubleList()) {
    words_.push_back(kDoubleList);
    auto l = v.toDoubleList();
    words_.push_back(static_cast<int64_t>(l.size()));
    if (!signature_)
      for (double x : l) words_.push_back(bitsOf(x));
  } else if (v.isBoolList()) {
    words_.push_back(kBoolList);
    auto l = v.toBoolList();
    words_.push_back(static_cast<int64_t>(l.size()));
    for (bool x : l) words_.push_back(x);
  } else if (v.isTensorList()) {
    words_.push_back(kTensorList);
    auto l = v.toTensorList();
    words_.push_back(static_cast<int64_t>(l.size()));
    for (const at::Tensor& t : l) addTensor(t);
  } else if (v.isOptionalTensorList()) {
    words_.push_back(kOptTensorList);
    auto l = v.toOptionalTensorList();
    words_.push_back(static_cast<int64_t>(l.size()));
    for (const std::optional<at::Tensor>& t : l) {
      if (t.has_value())
        addTensor(*t);
      else
        words_.push_back(kNone);
    }
  } else if (v.isDevice()) {
    words_.push_back(kDevice);
    words_.push_back(static_cast<int64_t>(v.toDevice().type()) * 1024 +
                     v.toDevice().index());
  } else if (v.isGenerator()) {
    words_.push_back(kGenerator);  // no effect on output metadata
  } else {
    return false;  // symbolic values, objects, ...: not cached
  }
  return true;
}

void MetaCacheKey::start(const void* op, KeyKind kind) {
  words_.clear();
  storages_.clear();
  signature_ = kind == KeyKind::kSignature;
  words_.push_back(reinterpret_cast<int64_t>(op));
  // Factories without a dtype follow the default dtype.
  words_.push_back(
      static_cast<int64_t>(c10::get_default_dtype_as_scalartype()));
}

void MetaCacheKey::addDouble(double d) {
  words_.push_back(signature_ ? kDouble : bitsOf(d));
}

void MetaCacheKey::addScalar(const c10::Scalar& s) {
  // The scalar's kind and value both matter (int ** 2 stays int, int ** 2.5
  // does not).
  if (s.isBoolean()) {
    words_.push_back(kBool);
    words_.push_back(s.toBool());
  } else if (s.isIntegral(false)) {
    words_.push_back(kInt);
    words_.push_back(s.toLong());
  } else if (s.isComplex()) {
    auto c = s.toComplexDouble();
    words_.push_back(kComplex);
    if (!signature_) {
      words_.push_back(bitsOf(c.real()));
      words_.push_back(bitsOf(c.imag()));
    }
  } else if (s.isFloatingPoint()) {
    words_.push_back(kDouble);
    if (!signature_) words_.push_back(bitsOf(s.toDouble()));
  } else {
    words_.push_back(kSymbolic);
    words_.push_back(reinterpret_cast<int64_t>(&s));  // never matches again
  }
}

bool MetaCacheKey::build(const void* op, const std::vector<c10::IValue>& args,
                         KeyKind kind) {
  start(op, kind);
  for (const auto& v : args)
    if (!add(v)) return false;
  return true;
}

const CachedMeta* findCachedMeta(const MetaCacheKey& key) {
  auto& c = cache();
  auto it = c.find(key.words());
  return it == c.end() ? nullptr : &it->second;
}

void storeCachedMeta(const MetaCacheKey& key, CachedMeta meta) {
  auto& c = cache();
  if (c.size() >= kMaxEntries) c.clear();
  c.emplace(key.words(), std::move(meta));
}

void forgetCachedMeta(const MetaCacheKey& key) { cache().erase(key.words()); }

}  // namespace torch_neuronx
