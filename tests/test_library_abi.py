"""The cuda backend calls NVIDIA's cuSOLVER and cuSPARSE through cffi in ABI mode, from declarations of its own:
each must pass its arguments as the library's header declares them (a wrong integer width or a missing
parameter would not fail until it ran on a GPU). Checked against the headers of the codegen extra's wheels."""

from __future__ import annotations

import pathlib
import re

import pytest

from rgpu.backends import cuda_solver, cuda_sparse

# Opaque handle types: pointers under their typedef names.
_HANDLES = {"cusolverDnHandle_t", "cusolverDnParams_t", "gesvdjInfo_t", "syevjInfo_t", "cudaStream_t",
            "cusparseHandle_t", "cusparseSpMatDescr_t", "cusparseConstSpMatDescr_t", "cusparseDnMatDescr_t",
            "cusparseConstDnMatDescr_t", "cusparseDnVecDescr_t", "cusparseConstDnVecDescr_t", "cusparseSpGEMMDescr_t"}


def _abi(params: str) -> list[str]:
    """Each parameter's class as the C calling convention passes it: pointer, 8-byte, 4-byte, byte or double."""
    out = []
    for p in params.split(","):
        p = " ".join(p.replace("const ", "").split())
        kind = p.rsplit(" ", 1)[0] if " " in p else p
        out.append("ptr" if "*" in p or kind in _HANDLES else
                   {"int64_t": "i64", "size_t": "i64", "double": "f64", "signed char": "i8"}.get(kind, "i32"))
    return out


def _header(name: str) -> pathlib.Path | None:
    import nvidia

    return next((pathlib.Path(p, "cu13", "include", name) for p in nvidia.__path__
                 if pathlib.Path(p, "cu13", "include", name).exists()), None)


@pytest.mark.parametrize("module, header, macro", [(cuda_solver, "cusolverDn.h", "CUSOLVERAPI"),
                                                   (cuda_sparse, "cusparse.h", "CUSPARSEAPI")])
def test_cuda_backend_declarations_match_the_header(module, header, macro):
    path = _header(header)
    if path is None:
        pytest.skip(f"{header} not installed (the codegen extra's nvidia wheels)")
    text = re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S))
    theirs = {name: _abi(params) for name, params in re.findall(rf"{macro}\s+(\w+)\s*\(([^;]*?)\)\s*;", text)}
    ours = {name: _abi(params) for name, params in re.findall(r"int (\w+)\(([^;]*?)\);", module.DECLARATIONS)}
    assert len(ours) >= 20
    assert {name: abi for name, abi in ours.items() if theirs.get(name) != abi} == {}
