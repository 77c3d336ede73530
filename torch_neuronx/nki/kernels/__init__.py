"""torch-neuronx's own NKI kernel library, written in NKI and tested against
torch references: attention, normalisation, softmax, matmul."""

from .attention import flash_attention_bwd, flash_attention_fwd
from .matmul import tiled_matmul
from .norms import rmsnorm_bwd, rmsnorm_fwd
from .softmax import softmax_fwd

__all__ = [
    "flash_attention_bwd",
    "flash_attention_fwd",
    "rmsnorm_bwd",
    "rmsnorm_fwd",
    "softmax_fwd",
    "tiled_matmul",
]
