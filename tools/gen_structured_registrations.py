"""Generates the structured ops' registrations (structured_registrations_*.cpp).

Every structured ATen operator whose out= kernel has a CPU implementation gets
PrivateUse1 kernels for its functional, in-place and out= variants, from the
templates in eager/structured_kernel.h and eager/structured_out_kernel.h. The
operators and their signatures come from torchgen, the code generator shipped
with the installed torch, so they match its headers: the build runs this
script (torch_neuronx/csrc/CMakeLists.txt) into its build directory, and each
torch version gets its own set (torch 2.14 adds `_scaled_mm_v2`,
`linalg_polar`, ...). To read what a torch version gets:
    python tools/gen_structured_registrations.py --out-dir /tmp/structured --shards 4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torchgen
import torchgen.local as local
from torchgen.api import cpp
from torchgen.api.types import CppSignatureGroup
from torchgen.gen import parse_native_yaml
from torchgen.model import DispatchKey, SchemaKind

SUPPORTED_TYPES = {
    "const at::Tensor &",
    "at::Tensor &",
    "bool",
    "at::IntArrayRef",
    "const at::Scalar &",
    "int64_t",
    "::std::optional<double>",
    "c10::string_view",
    "::std::optional<at::ScalarType>",
    "::std::optional<int64_t>",
    "const ::std::optional<at::Tensor> &",
    "const ::std::optional<at::Scalar> &",
    "at::OptionalIntArrayRef",
    "::std::optional<c10::string_view>",
    "at::ScalarType",
    "const at::ITensorListRef &",
    "::std::optional<bool>",
    "double",
}

# Ops kept on the generic path (all variants): their CPU out= kernel resizes
# the output (the reduced losses compute the unreduced loss into `out` first),
# which device outputs, sized by the meta function, do not allow.
EXCLUDED: set[str] = {"mse_loss", "smooth_l1_loss"}


def write_if_changed(path: Path, text: str) -> None:
    # An unchanged file keeps its time stamp: ninja then rebuilds nothing.
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    # How many files: the build names them (STRUCTURED_SHARDS in
    # torch_neuronx/csrc/CMakeLists.txt), so the count lives there alone.
    parser.add_argument("--shards", type=int, required=True)
    args = parser.parse_args()
    out_dir: Path = args.out_dir
    shards: int = args.shards
    d = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native"
    parsed = parse_native_yaml(str(d / "native_functions.yaml"), str(d / "tags.yaml"))
    cpu = parsed.backend_indices[DispatchKey.CPU]
    by_name = {str(f.func.name): f for f in parsed.native_functions}
    entries = []
    with local.parametrize(
        use_const_ref_for_mutable_tensors=False, use_ilistref_for_tensor_lists=True
    ):
        for f in parsed.native_functions:
            if f.root_name in EXCLUDED:
                continue
            kind = f.func.kind()
            if f.structured and kind == SchemaKind.out:
                out = f  # the out= variant itself
            elif f.structured_delegate is not None:
                out = by_name[str(f.structured_delegate)]
            else:
                continue
            if not cpu.has_kernel(out):
                continue
            if kind not in (SchemaKind.functional, SchemaKind.inplace, SchemaKind.out):
                continue
            group = CppSignatureGroup.from_native_function(f, method=False)
            # out= kernels are registered in schema order (outputs last): the
            # "faithful" signature, at::<op>_outf.
            sig = group.faithful_signature if kind == SchemaKind.out else group.signature
            if sig is None:
                sig = group.signature
            types = [a.type for a in sig.arguments()]
            if any(t not in SUPPORTED_TYPES for t in types):
                continue
            ret = cpp.returns_type(f.func.returns, symint=False).cpp_type()
            name = sig.name()
            fptr = f"{ret} (*)({', '.join(types)})"
            if kind == SchemaKind.functional:
                out_sig = CppSignatureGroup.from_native_function(out, method=False).signature
                out_types = [a.type for a in out_sig.arguments()]
                out_ret = cpp.returns_type(out.func.returns, symint=False).cpp_type()
                out_ptr = f"{out_ret} (*)({', '.join(out_types)})"
                cpu_fn = f"static_cast<{out_ptr}>(&at::cpu::{out_sig.name()})"
                template = "Functional"
            elif kind == SchemaKind.inplace:
                cpu_fn = f"static_cast<{fptr}>(&at::cpu::{name})"
                template = "Inplace"
            else:
                cpu_fn = f"static_cast<{fptr}>(&at::cpu::{name})"
                template = "OutVariant"
            meta_fn = f"static_cast<{fptr}>(&at::meta::{name})"
            entries.append((str(f.func.name), name, template, meta_fn, cpu_fn, out))
    out_dir.mkdir(parents=True, exist_ok=True)
    for shard in range(shards):
        mine = entries[shard::shards]
        includes = sorted(
            {f"#include <ATen/ops/{e[5].root_name}_meta_dispatch.h>" for e in mine}
            | {f"#include <ATen/ops/{e[5].root_name}_cpu_dispatch.h>" for e in mine}
        )
        lines = [
            "// @generated by tools/gen_structured_registrations.py — do not edit.",
            f"// Structured ops, shard {shard + 1} of {shards}: PrivateUse1 kernels from",
            "// eager/structured_kernel.h.",
            "#include <torch/library.h>",
            "",
            *includes,
            "",
            '#include "eager/structured_kernel.h"',
            '#include "eager/structured_out_kernel.h"',
            "",
            "namespace torch_neuronx::structured {",
            "namespace {",
            "",
        ]
        for opname, _, _, _, _, _ in mine:
            ident = "k_" + opname.replace(".", "_")
            lines.append(f'constexpr char {ident}[] = "aten::{opname}";')
        lines += ["", "}  // namespace", "", "TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {"]
        for opname, _, template, meta_fn, cpu_fn, _ in mine:
            ident = "k_" + opname.replace(".", "_")
            lines.append(f'  m.impl("{opname}",')
            lines.append(f"         TORCH_FN(({template}<{meta_fn},")
            lines.append(f"                   {cpu_fn}, {ident}>::call)));")
        lines += ["}", "", "}  // namespace torch_neuronx::structured", ""]
        write_if_changed(out_dir / f"structured_registrations_{shard}.cpp", "\n".join(lines))
    print(f"{len(entries)} structured ops in {shards} shards under {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
