"""The shims torch-neuronx installs in other libraries are installed once: running an
installer again (a reload, an import hook after a direct call) leaves the one
replacement in place instead of wrapping it again."""

import importlib

import torch

from torch_neuronx.adapters import monkey_patch as _monkey_patch
from torch_neuronx.adapters import tensor_str_support
from torch_neuronx.compile import program_cache
from torch_neuronx.distributed import shims
from torch_neuronx.profiling import hooks


def test_wrap_replaces_once():
    class Owner:
        @staticmethod
        def f(x):
            return x + 1

    calls = []

    def make(original):
        calls.append(original)
        return lambda x: original(x) * 10

    _monkey_patch.wrap(Owner, "f", make)
    first = Owner.f
    _monkey_patch.wrap(Owner, "f", make)
    assert Owner.f is first and len(calls) == 1
    assert Owner.f(1) == 20
    assert _monkey_patch.is_patched(Owner.f)


def _install_all_and_read():
    import torch.distributed as dist
    from torch._inductor import codecache
    from torch.nn.parallel import DistributedDataParallel as DDP

    shims.patch_default_process_group_backend()
    shims.allow_ddp_bf16_comm_hooks()
    hooks.install()
    program_cache.record_loaded_libraries(codecache)
    tensor_str_support.install()
    return {
        "BackendConfig.__init__": dist.distributed_c10d.BackendConfig.__init__,
        "DDP._check_comm_hook": DDP._check_comm_hook,
        "prepare_trace": torch.profiler.profiler._KinetoProfile.prepare_trace,
        "_load_library": codecache.CppCodeCache.__dict__["_load_library"],
        "_tensor_str._str": torch._tensor_str._str,
    }


def test_installers_run_twice_keep_one_replacement():
    patched = _install_all_and_read()
    assert all(_monkey_patch.is_patched(getattr(f, "__func__", f)) for f in patched.values())
    assert _install_all_and_read() == patched


def test_safetensors_load_file_is_wrapped_once():
    st = importlib.import_module("safetensors.torch")
    from torch_neuronx.adapters import safetensors_support

    wrapped = st.load_file
    assert _monkey_patch.is_patched(wrapped)
    safetensors_support._patch_safetensors_torch(st)
    assert st.load_file is wrapped
