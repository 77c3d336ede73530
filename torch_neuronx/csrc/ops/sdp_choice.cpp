// scaled_dot_product_attention picks its backend through a dispatch stub,
// not through the _fused_sdp_choice operator: for neuron the stub asks the
// operator's neuron kernel (torch_neuronx/nki/aten_routing.py), which
// chooses the NKI flash kernels when the shapes fit and math otherwise;
// instead of math, the CPU's fused kernel where the CPU would take it; with
// math turned off by the user, the overrideable backend. It goes
// to that kernel directly, past fake-tensor and other Python modes: while
// torch.compile traces, the operator's meta kernel would always answer "math"
// and the compiled graph would never use the kernels.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

namespace torch_neuronx {
namespace {

constexpr auto kMath = static_cast<int64_t>(at::SDPBackend::math);
constexpr auto kFlash = static_cast<int64_t>(at::SDPBackend::flash_attention);
constexpr auto kOverrideable =
    static_cast<int64_t>(at::SDPBackend::overrideable);
constexpr auto kError = static_cast<int64_t>(at::SDPBackend::error);

int64_t neuronSdpChoice(const at::Tensor& query, const at::Tensor& key,
                        const at::Tensor& value,
                        const std::optional<at::Tensor>& attn_mask,
                        double dropout_p, bool is_causal,
                        std::optional<double> scale, bool enable_gqa) {
  static const bool has_kernel = [] {
    auto op = c10::Dispatcher::singleton().findSchema(
        {"aten::_fused_sdp_choice", ""});
    return op && op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1);
  }();
  int64_t choice = kMath;
  if (has_kernel) {  // the NKI routing (none registered: math, as before)
    c10::impl::ExcludeDispatchKeyGuard no_python(c10::DispatchKeySet(
        {c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
    choice = at::_ops::_fused_sdp_choice::redispatch(
        c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), query, key, value,
        attn_mask, dropout_p, is_causal, scale, enable_gqa);
  }
  // Where the NKI kernels do not fit: the CPU's fused attention kernel, one
  // device op, when the CPU would choose it for these tensors (its checks
  // look at shapes, strides, dtypes and the user's torch.backends switches,
  // not at the device) - the math composite is ~15 ops, 3-4x the host
  // time. With dropout the math path stays: its mask is drawn from the
  // neuron generator, the CPU kernel would draw from the CPU's.
  const auto& ctx = at::globalContext();
  if (choice == kMath && dropout_p == 0.0 && ctx.userEnabledFlashSDP()) {
    // The CPU's choice raises "No viable backend" when none of the CPU's
    // backends it leaves on takes the inputs: then it has no say.
    try {
      const int64_t cpu = at::_ops::_fused_sdp_choice::redispatch(
          c10::DispatchKeySet(c10::DispatchKey::CPU), query, key, value,
          attn_mask, dropout_p, is_causal, scale, enable_gqa);
      if (cpu == kFlash) choice = kFlash;
    } catch (const c10::Error&) {
    }
  }
  // The user's torch.backends switches (sdpa_kernel): with math turned off,
  // the overrideable backend - the slot for PrivateUse1 devices, which code
  // written for TorchNeuron selects with sdpa_kernel(SDPBackend.OVERRIDEABLE)
  // - runs any inputs (nki/aten_routing.py); with it off too, no backend.
  if (choice == kMath && !ctx.userEnabledMathSDP())
    choice = ctx.userEnabledOverrideableSDP() ? kOverrideable : kError;
  return choice;
}

}  // namespace
}  // namespace torch_neuronx

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub,
                              &torch_neuronx::neuronSdpChoice)
}  // namespace at::native
