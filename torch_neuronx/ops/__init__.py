"""ATen operators neuron implements in Python (CUDA-only in ATen, composed of
ATen ops here); ``register()`` binds them to the PrivateUse1 key at import."""

from . import flash_attention


def register() -> None:
    flash_attention.register()
