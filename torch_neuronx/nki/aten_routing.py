"""ATen operators that run as NKI kernels on neuron tensors.

- ``scaled_dot_product_attention``: the neuron ``_fused_sdp_choice`` picks the
  overrideable backend when the shapes fit the flash kernels (4-D fp32/bf16
  q/k/v, query length a multiple of 128, key length a multiple of 128, head
  dim <= 128, no mask, no dropout; causal only for equal lengths; grouped
  query heads), and ``_scaled_dot_product_fused_attention_overrideable`` and
  its backward run ``flash_attention_fwd`` / ``flash_attention_bwd``.
  Anything else takes the math backend (the device's composite ops), as
  before.
- ``rms_norm`` (``_fused_rms_norm`` and its backward, as on CUDA) runs
  ``rmsnorm_fwd`` / ``rmsnorm_bwd`` over the last dimension.

``TORCH_NEURONX_DISABLE_NKI_KERNELS=1`` turns the routing off (read at each
call). Attention is routed only with ``TORCH_NEURONX_SIMULATE_NKI_ATTENTION=1``:
on this simulator the flash kernels run tile by tile, 1.5-6x slower than the CPU's
fused attention kernel, which computes SDPA by default (``csrc/ops/sdp_choice.cpp``:
the same results as the CPU's; a TorchTitan debug-model step took 1.9 s with the
kernels, 0.34 s without). The variable brings back the kernels' numerics and their
cost in the profiler's estimate. ``torch_neuronx.get_executed_ops()`` lists
``nki::<kernel>`` for each kernel that ran.
"""

from __future__ import annotations

import math
import os

import torch

_MATH = 0  # SDPBackend.math
_OVERRIDEABLE = 4  # SDPBackend.overrideable
_lib = None


def enabled() -> bool:
    return os.environ.get("TORCH_NEURONX_DISABLE_NKI_KERNELS", "0") in ("", "0")


def simulates_attention() -> bool:
    """``TORCH_NEURONX_SIMULATE_NKI_ATTENTION=1``: SDPA runs the NKI flash kernels
    (see the module docstring)."""
    return os.environ.get("TORCH_NEURONX_SIMULATE_NKI_ATTENTION", "0") not in ("", "0")


def _sdpa_fits(q, k, v, attn_mask, dropout_p, is_causal) -> bool:
    if not enabled() or not simulates_attention() or attn_mask is not None or dropout_p != 0.0:
        return False
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return False
    if q.dtype not in (torch.float32, torch.bfloat16) or not (q.dtype == k.dtype == v.dtype):
        return False
    B, H, S, D = q.shape
    if k.shape[0] != B or v.shape[:3] != k.shape[:3] or k.shape[3] != D or v.shape[3] != D:
        return False
    KVH, Sk = k.shape[1], k.shape[2]
    if KVH == 0 or H % KVH or S % 128 or Sk % 128 or D > 128 or S == 0 or Sk == 0:
        return False
    return not (is_causal and S != Sk)


def _fused_sdp_choice(
    q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None, enable_gqa=False
):
    if _sdpa_fits(q, k, v, attn_mask, dropout_p, is_causal):
        return _OVERRIDEABLE
    # sdpa_kernel(SDPBackend.OVERRIDEABLE) turns math off: the overrideable
    # backend runs any inputs (_overrideable_forward).
    if not torch.backends.cuda.math_sdp_enabled() and torch._C._get_overrideable_sdp_enabled():
        return _OVERRIDEABLE
    return _MATH  # the device's composite ops


def _laid_out_like(t, ref):
    """``t`` (from a kernel) in ``ref``'s memory layout: what the
    operators' meta kernels say (``empty_like(query)`` for the output and each
    gradient) and compiled graphs check — TorchTitan's q/k/v are transposed views.
    """
    if ref.is_contiguous():
        return t.contiguous()  # (the CPU's fused kernel returns [B, L, H, D] layouts)
    order = sorted(range(ref.dim()), key=lambda d: -ref.stride(d))
    laid = torch.empty([ref.shape[d] for d in order], dtype=t.dtype, device=t.device)
    out = laid.permute([order.index(d) for d in range(ref.dim())])
    out.copy_(t)
    return out


def _forward_results(q, k, o, lse, seed=None, offset=None):
    """The overrideable op's nine results as its meta kernel has them (compiled
    graphs check): the output in the query's layout, no variable-length offsets,
    0-d seed and offset (zeros without dropout)."""
    empty_i = torch.empty(0, dtype=torch.int64, device=q.device)
    if seed is None:  # two tensors: results never alias each other
        seed, offset = (torch.zeros((), dtype=torch.int64, device=q.device) for _ in range(2))
    empty = torch.empty(0, device=q.device)
    L, S = q.size(-2), k.size(-2)
    return (_laid_out_like(o, q), lse, empty_i, empty_i, L, S, seed, offset, empty)


def _backward_results(q, k, v, dq, dk, dv, dbias=None):
    """The gradients in their inputs' layouts; no mask gradient: an empty tensor."""
    if dbias is None:
        dbias = torch.empty(0, device=q.device)
    return _laid_out_like(dq, q), _laid_out_like(dk, k), _laid_out_like(dv, v), dbias


def _sdpa_forward(
    q, k, v, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None
):
    if not _sdpa_fits(q, k, v, attn_bias, dropout_p, is_causal):
        return _overrideable_forward(q, k, v, attn_bias, dropout_p, is_causal, scale)
    from . import kernels

    B, H, _, D = q.shape
    scale = scale if scale is not None else 1.0 / math.sqrt(D)
    o, lse = kernels.flash_attention_fwd[B, H](q, k, v, softmax_scale=scale, causal=is_causal)
    return _forward_results(q, k, o, lse)


def _sdpa_backward(
    grad_out,
    q,
    k,
    v,
    attn_bias,
    grad_input_mask,
    out,
    logsumexp,
    cum_seq_q,
    cum_seq_k,
    max_q,
    max_k,
    dropout_p,
    is_causal,
    philox_seed,
    philox_offset,
    *,
    scale=None,
):
    if not _sdpa_fits(q, k, v, attn_bias, dropout_p, is_causal):
        return _overrideable_backward(
            grad_out, q, k, v, attn_bias, out, logsumexp, dropout_p, is_causal,
            philox_seed, philox_offset, scale,
        )  # fmt: skip
    from . import kernels

    B, H, S, D = q.shape
    scale = scale if scale is not None else 1.0 / math.sqrt(D)
    dq, dk, dv = kernels.flash_attention_bwd[B, k.shape[1]](
        q, k, v, out, grad_out, logsumexp, softmax_scale=scale, causal=is_causal
    )
    return _backward_results(q, k, v, dq, dk, dv)


# The overrideable backend for what the NKI kernels do not take (the default, as
# the kernels run only with TORCH_NEURONX_SIMULATE_NKI_ATTENTION=1), so that code
# selecting it — ``sdpa_kernel(SDPBackend.OVERRIDEABLE)``, the backend slot for
# PrivateUse1 devices that TorchNeuron code picks — runs, with the CPU's numbers:
# - 4-D, equal head counts, no mask and no dropout: the CPU's fused attention
#   kernel (what the CPU itself runs for these inputs), forward and backward;
# - otherwise the math composite CPU attention falls back to (masks, grouped
#   query heads, dropout drawn from the neuron generator, whose numbers are the
#   CPU's). Its backward recomputes the forward under autograd; for dropout the
#   generator's state before the draw travels in ``philox_seed`` /
#   ``philox_offset`` (CUDA's slots for the same purpose), so the backward draws
#   the same mask.
def _fused_kernel_fits(q, k, v, attn_bias, dropout_p) -> bool:
    return (
        q.dim() == 4
        and attn_bias is None
        and dropout_p == 0.0
        and k.shape[1] == q.shape[1] == v.shape[1]
        and q.dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16)
    )


def _math(q, k, v, attn_bias, dropout_p, is_causal, scale):
    gqa = q.dim() >= 3 and k.size(-3) != q.size(-3)
    return torch.ops.aten._scaled_dot_product_attention_math(
        q, k, v, attn_bias, dropout_p, is_causal, None, scale=scale, enable_gqa=gqa
    )[0]


def _logsumexp(q, k, attn_bias, is_causal, scale):
    """The log-sum-exp of each query's scaled, masked scores (the op's second
    result), in float32 as the fused kernels keep it."""
    scale = scale if scale is not None else 1.0 / math.sqrt(q.size(-1))
    if k.size(-3) != q.size(-3):
        k = k.repeat_interleave(q.size(-3) // k.size(-3), dim=-3)
    scores = (q.float() @ k.float().transpose(-2, -1)) * scale
    if is_causal:
        L, S = scores.shape[-2:]
        keep = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_bias is not None and attn_bias.dtype == torch.bool:  # True: attend
        scores = scores.masked_fill(~attn_bias, float("-inf"))
    elif attn_bias is not None:
        scores = scores + attn_bias.float()
    lse = torch.logsumexp(scores, -1)
    return lse if q.dim() == 4 else lse.unsqueeze(0)


def _overrideable_forward(q, k, v, attn_bias, dropout_p, is_causal, scale):
    if _fused_kernel_fits(q, k, v, attn_bias, dropout_p):
        o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, is_causal, scale=scale
        )
        # The CPU kernel lays the log-sum-exp out [B, L, H]; the op's meta kernel
        # (and compiled graphs) have it contiguous [B, H, L].
        return _forward_results(q, k, o, lse.contiguous())
    state = torch.neuron.get_rng_state(q.device).view(torch.int64)  # before the draw
    with torch.no_grad():
        o = _math(q, k, v, attn_bias, dropout_p, is_causal, scale)
        lse = _logsumexp(q, k, attn_bias, is_causal, scale)
    seed, offset = (state[i].to(q.device) for i in range(2))
    return _forward_results(q, k, o, lse, seed, offset)


def _autograd_reenabled():
    """The autograd dispatch keys back on: a backend kernel runs with them
    excluded (below autograd), and the backward differentiates the math
    composite it recomputes."""
    from torch._C import DispatchKey

    exclude = torch._C._dispatch_tls_local_exclude_set()
    for key in (
        DispatchKey.AutogradFunctionality,
        DispatchKey.AutogradOther,
        DispatchKey.AutogradNestedTensor,
        DispatchKey.ADInplaceOrView,
    ):
        exclude = exclude.remove(key)
    return torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude)


def _overrideable_backward(
    grad_out, q, k, v, attn_bias, out, lse, dropout_p, is_causal, seed, offset, scale
):
    if _fused_kernel_fits(q, k, v, attn_bias, dropout_p):
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad_out, q, k, v, out, lse, 0.0, is_causal, scale=scale
        )
        return _backward_results(q, k, v, dq, dk, dv)
    inputs = [t.detach().requires_grad_() for t in (q, k, v)]
    bias = None
    if attn_bias is not None:
        bias = attn_bias.detach().requires_grad_(attn_bias.is_floating_point())
    current = torch.neuron.get_rng_state(q.device)
    if dropout_p > 0.0:  # the forward's draw again
        state = torch.stack([seed.cpu().reshape(()), offset.cpu().reshape(())])
        torch.neuron.set_rng_state(state.view(torch.uint8), q.device)
    try:
        with torch.enable_grad(), _autograd_reenabled():
            o = _math(*inputs, bias, dropout_p, is_causal, scale)
            wrt = inputs + ([bias] if bias is not None and bias.requires_grad else [])
            grads = torch.autograd.grad(o, wrt, grad_out)
    finally:
        torch.neuron.set_rng_state(current, q.device)
    dbias = None
    if len(grads) > 3:  # summed over the dims the mask was broadcast along
        dbias = grads[3]
    elif bias is not None:
        dbias = torch.zeros_like(attn_bias)
    return _backward_results(q, k, v, *grads[:3], dbias)


def _rms_fits(x, normalized_shape, weight) -> bool:
    return (
        enabled()
        and len(normalized_shape) == 1
        and x.dim() >= 1
        and x.numel() > 0
        and x.dtype in (torch.float32, torch.bfloat16)
        and x.shape[-1] <= 8192
        and (weight is None or weight.dtype == x.dtype)
    )


def _fused_rms_norm(x, normalized_shape, weight=None, eps=None):
    from . import kernels

    if not _rms_fits(x, normalized_shape, weight):
        return _rms_norm_reference(x, normalized_shape, weight, eps)
    eps = eps if eps is not None else torch.finfo(x.dtype).eps
    F = x.shape[-1]
    x2 = x.reshape(-1, F)
    y, rstd = kernels.rmsnorm_fwd(x2, weight, eps=float(eps))
    return y.reshape(x.shape), rstd.reshape(x.shape[:-1] + (1,))


def _rms_norm_reference(x, normalized_shape, weight, eps):
    """The fused op's semantics in ATen ops, for inputs the kernel does not
    take (statistics in fp32, or fp64 for fp64 inputs)."""
    dims = tuple(range(x.dim() - len(normalized_shape), x.dim()))
    eps = eps if eps is not None else torch.finfo(x.dtype).eps
    acc = torch.float64 if x.dtype in (torch.float64, torch.complex128) else torch.float32
    xa = x if x.is_complex() else x.to(acc)
    sq = (xa * xa.conj()).real if x.is_complex() else xa * xa
    rstd = torch.rsqrt(sq.mean(dims, keepdim=True) + eps)
    y = xa * rstd
    if weight is not None:
        y = y * weight
    return y.to(x.dtype), rstd


def _fused_rms_norm_backward(grad_out, x, normalized_shape, rstd, weight, output_mask):
    from . import kernels

    F = x.shape[-1]
    if _rms_fits(x, normalized_shape, weight):
        dx, dw = kernels.rmsnorm_bwd(
            grad_out.reshape(-1, F), x.reshape(-1, F), rstd.reshape(-1).float(), weight
        )
        dx = dx.reshape(x.shape)
        dw = dw.reshape(weight.shape) if weight is not None else None
    else:  # the same formula in ATen ops
        dims = tuple(range(x.dim() - len(normalized_shape), x.dim()))
        lead = tuple(range(x.dim() - len(normalized_shape)))
        acc = torch.float64 if x.dtype == torch.float64 else torch.float32
        xf, g = x.to(acc), grad_out.to(acc)
        xhat = xf * rstd
        gw = g * weight.to(acc) if weight is not None else g
        dx = (rstd * (gw - xhat * (gw * xhat).mean(dims, keepdim=True))).to(x.dtype)
        dw = None
        if weight is not None:  # (a sum over no dims would sum over all)
            dw = ((g * xhat).sum(lead) if lead else g * xhat).to(weight.dtype)
    return (dx if output_mask[0] else None, dw if output_mask[1] and weight is not None else None)


def _rms_norm_autograd(x, normalized_shape, weight=None, eps=None):
    """rms_norm on neuron: through the fused op (with its derivative) as on
    CUDA when the kernel takes the inputs; else ATen's composite, as before
    (its checks and messages included)."""
    ns = list(normalized_shape)
    if (
        _rms_fits(x, ns, weight)
        and list(x.shape[x.dim() - len(ns) :]) == ns
        and (weight is None or list(weight.shape) == ns)
    ):
        return torch.ops.aten._fused_rms_norm(x, ns, weight, eps)[0]
    return torch.ops.aten.rms_norm.default._op_dk(
        torch._C.DispatchKey.CompositeImplicitAutograd, x, normalized_shape, weight, eps
    )


def register() -> None:
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")
    _lib.impl("_fused_sdp_choice", _fused_sdp_choice, "PrivateUse1")
    _lib.impl("_scaled_dot_product_fused_attention_overrideable", _sdpa_forward, "PrivateUse1")
    _lib.impl(
        "_scaled_dot_product_fused_attention_overrideable_backward", _sdpa_backward, "PrivateUse1"
    )
    _lib.impl("_fused_rms_norm", _fused_rms_norm, "PrivateUse1")
    _lib.impl("_fused_rms_norm_backward", _fused_rms_norm_backward, "PrivateUse1")
    _lib.impl("rms_norm", _rms_norm_autograd, "AutogradPrivateUse1")
