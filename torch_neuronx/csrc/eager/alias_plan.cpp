#include "eager/alias_plan.h"

#include <c10/core/TensorImpl.h>
#include <c10/util/accumulate.h>

#include <algorithm>

#include "adaptive/item_signature.h"
#include "core/compute_pool.h"

namespace torch_neuronx {
namespace {

void noDelete(void*) {}

}  // namespace

int AliasPlan::add(const at::Tensor& t) {
  TensorSpec spec;
  if (t.defined()) {
    const c10::StorageImpl* key = t.storage().unsafeGetStorageImpl();
    int storage = -1;
    for (size_t i = 0; i < storages_.size(); ++i)
      if (storages_[i].key == key) storage = static_cast<int>(i);
    if (storage < 0) {
      storages_.push_back(
          StorageSpec{key, const_cast<void*>(t.storage().data()),
                      t.storage().nbytes(), std::nullopt, true});
      if (adaptive::enabled())
        storages_.back().watch.emplace(t.storage().getWeakStorageImpl());
      storage = static_cast<int>(storages_.size()) - 1;
    }
    spec.storage = storage;
    spec.sizes.assign(t.sizes().begin(), t.sizes().end());
    spec.strides.assign(t.strides().begin(), t.strides().end());
    spec.storage_offset = t.storage_offset();
    spec.dtype = t.dtype();
    spec.conj = t.is_conj();
    spec.neg = t.is_neg();
  }
  tensors_.push_back(std::move(spec));
  return static_cast<int>(tensors_.size()) - 1;
}

int AliasPlan::keep(at::Tensor t) {
  TensorSpec spec;
  spec.storage = -2;
  spec.kept = static_cast<int>(kept_.size());
  kept_.push_back(std::move(t));
  tensors_.push_back(std::move(spec));
  return static_cast<int>(tensors_.size()) - 1;
}

void AliasPlan::noteHeldStorages() {
  for (StorageSpec& s : storages_) {
    if (!s.watch) continue;
    s.held = !s.watch->expired();
    s.watch.reset();  // known now; nothing more to watch
  }
}

AliasPlan::Built AliasPlan::build() const {
  // A small item's kernels run on the worker's thread alone
  // (core/compute_pool.h).
  int64_t largest = 0;
  for (const TensorSpec& spec : tensors_)
    largest = std::max(largest, c10::multiply_integers(spec.sizes));
  useOneThreadIfSmall(largest);
  // Runs inside the item's InferenceMode: the aliases are inference tensors
  // (no version counter, no autograd keys).
  c10::SmallVector<c10::Storage, 4> storages;
  storages.reserve(storages_.size());
  for (const StorageSpec& s : storages_)
    storages.emplace_back(
        c10::Storage::use_byte_size_t(), s.nbytes,
        c10::DataPtr(s.data, s.data, &noDelete, c10::Device(c10::kCPU)),
        /*allocator=*/nullptr, /*resizable=*/false);
  Built out;
  out.reserve(tensors_.size());
  for (const TensorSpec& spec : tensors_) {
    if (spec.storage == -1) {
      out.emplace_back();
    } else if (spec.storage == -2) {
      out.push_back(kept_[spec.kept]);
    } else {
      auto impl = c10::make_intrusive<c10::TensorImpl>(
          c10::Storage(storages[spec.storage]),
          c10::DispatchKeySet(c10::DispatchKey::CPU), spec.dtype);
      impl->set_sizes_and_strides(spec.sizes, spec.strides,
                                  spec.storage_offset);
      if (spec.conj) impl->_set_conj(true);
      if (spec.neg) impl->_set_neg(true);
      out.emplace_back(std::move(impl));
    }
  }
  return out;
}

}  // namespace torch_neuronx
