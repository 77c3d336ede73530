"""torch-neuronx's own NKI kernel library, written in NKI and tested against
torch references: attention, normalisation, softmax, rotary embedding, MLPs
and matmuls. Instructions are spelled in the current ``nki.isa`` form,
destination first (``nisa.nc_matmul(dst=..., stationary=..., moving=...)``);
``_tiles`` holds the Tensor-engine steps several kernels share."""

from .attention import flash_attention_bwd, flash_attention_fwd
from .matmul import tiled_matmul
from .mlp import grouped_matmul, swiglu_mlp
from .norms import layernorm_bwd, layernorm_fwd, rmsnorm_bwd, rmsnorm_fwd
from .rope import rope_fwd
from .softmax import softmax_fwd

__all__ = [
    "flash_attention_bwd",
    "flash_attention_fwd",
    "grouped_matmul",
    "layernorm_bwd",
    "layernorm_fwd",
    "rmsnorm_bwd",
    "rmsnorm_fwd",
    "rope_fwd",
    "softmax_fwd",
    "swiglu_mlp",
    "tiled_matmul",
]
