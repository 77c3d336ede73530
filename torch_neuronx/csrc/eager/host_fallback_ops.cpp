#include "eager/host_fallback_ops.h"

#include <array>

namespace torch_neuronx {

bool isHostFallbackOp(std::string_view name) {
  static constexpr std::array<std::string_view, 8> kOps = {
      "aten::linalg_qr",     "aten::_linalg_svd",
      "aten::_linalg_eigh",  "aten::linalg_cholesky_ex",
      "aten::linalg_inv_ex", "aten::linalg_lu_factor_ex",
      "aten::_linalg_det",   "aten::_linalg_slogdet"};
  // Without the overload: the first '.' after the "aten::" namespace.
  const size_t dot = name.find('.', 6);
  const std::string_view op = name.substr(0, dot);
  for (std::string_view o : kOps)
    if (o == op) return true;
  return false;
}

}  // namespace torch_neuronx
