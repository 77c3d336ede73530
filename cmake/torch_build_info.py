"""Prints, as CMake `set()` commands, what a C++ extension needs of the
installed torch: version, headers, libraries, ABI and the definitions its
headers are compiled with.

Read from torch itself instead of `find_package(Torch)`: torch's CMake
package of a CUDA build requires the CUDA toolkit at configure time
(Caffe2's `torch::cudart` and friends), though torch-neuronx links no CUDA
library. The same facts hold for CPU and CUDA builds of any torch version.
"""

from __future__ import annotations

import os
import sys


def cmake_list(values: list[str]) -> str:
    return ";".join(v.replace(";", r"\;") for v in values)


def main() -> int:
    # Autoloading off: an installed torch_neuronx must not load while it is
    # being rebuilt.
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    import torch
    import torch.distributed as dist

    prefix = os.path.dirname(torch.__file__)
    include = os.path.join(prefix, "include")
    defines = [f"_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}"]
    # The definitions torch_cpu's consumers compile with (Caffe2Targets.cmake's
    # INTERFACE_COMPILE_DEFINITIONS): the c10d headers (ProcessGroupGloo.hpp,
    # Exceptions.h's DistBackendError) declare parts only under them.
    if dist.is_available():
        defines.append("USE_DISTRIBUTED")
        if dist.is_gloo_available():
            defines.append("USE_C10D_GLOO")
        import torch.distributed.rpc as rpc

        if rpc.is_available():
            defines.append("USE_RPC")
            if hasattr(torch._C._distributed_rpc, "TensorPipeAgent"):
                defines.append("USE_TENSORPIPE")
    facts = {
        "TORCH_VERSION": torch.__version__.split("+")[0],
        "TORCH_VERSION_FULL": torch.__version__,
        "TORCH_CUDA_VERSION": torch.version.cuda or "",
        "TORCH_INSTALL_PREFIX": prefix,
        "TORCH_INCLUDE_DIRS": cmake_list(
            [include, os.path.join(include, "torch", "csrc", "api", "include")]
        ),
        "TORCH_LIBRARY_DIR": os.path.join(prefix, "lib"),
        "TORCH_COMPILE_DEFINITIONS": cmake_list(defines),
    }
    for key, value in facts.items():
        print(f'set({key} "{value}")')
    return 0


if __name__ == "__main__":
    sys.exit(main())
