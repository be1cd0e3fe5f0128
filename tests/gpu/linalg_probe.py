"""torch.linalg and torch.sparse on CUDA (issue 16's acceptance): inv, solve, cholesky, qr, svd, eigh, lstsq and
a few neighbours, and torch.sparse.mm with CSR and COO operands. Inputs are made on the CPU (no cuRAND), every
output's bytes are hashed, so the native run and the run through `rgpu run` compare line for line; a failing op
prints its error instead. Each op runs twice: with PyTorch's default linear-algebra library choice and with
cuSOLVER forced (torch.backends.cuda.preferred_linalg_library)."""

import hashlib

import torch


def digest(out) -> str:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    parts = []
    for t in outs:
        t = t.detach()
        if t.is_sparse or t.layout != torch.strided:
            t = t.to_dense()
        parts.append(hashlib.sha256(t.contiguous().cpu().numpy().tobytes()).hexdigest()[:16])
    return " ".join(parts)


def inputs():
    g = torch.Generator().manual_seed(0)

    def rand(*shape, dtype=torch.float64):
        return torch.randn(*shape, generator=g, dtype=dtype).cuda()

    spd = rand(48, 48)
    spd = spd @ spd.mT + 48 * torch.eye(48, device="cuda", dtype=torch.float64)
    sym = rand(40, 40)
    dense = rand(64, 32, dtype=torch.float32)
    sparse = (torch.rand(48, 64, generator=g) < 0.1) * torch.randn(48, 64, generator=g)
    return {
        "inv f64 64x64": lambda: torch.linalg.inv(rand(64, 64)),
        "inv f32 40x40": lambda: torch.linalg.inv(rand(40, 40, dtype=torch.float32)),
        "inv batched 4x16x16": lambda: torch.linalg.inv(rand(4, 16, 16)),
        "solve 50x50 x3": lambda: torch.linalg.solve(rand(50, 50), rand(50, 3)),
        "lu_factor 33x33": lambda: torch.linalg.lu_factor(rand(33, 33)),
        "det 20x20": lambda: torch.linalg.det(rand(20, 20)),
        "cholesky 48x48": lambda: torch.linalg.cholesky(spd),
        "cholesky upper f32": lambda: torch.linalg.cholesky(spd.float(), upper=True),
        "cholesky_solve": lambda: torch.cholesky_solve(rand(48, 2), torch.linalg.cholesky(spd)),
        "cholesky batched 3x48x48": lambda: torch.linalg.cholesky(spd.expand(3, 48, 48) * rand(3, 1, 1).abs()),
        "qr reduced 40x20": lambda: torch.linalg.qr(rand(40, 20)),
        "qr complete f32 30x30": lambda: torch.linalg.qr(rand(30, 30, dtype=torch.float32), mode="complete"),
        "svd 30x20": lambda: torch.linalg.svd(rand(30, 20), full_matrices=False),
        "svd 80x60": lambda: torch.linalg.svd(rand(80, 60), full_matrices=False),
        "svd batched 3x8x6": lambda: torch.linalg.svd(rand(3, 8, 6)),
        "svdvals gesvd": lambda: torch.linalg.svdvals(rand(40, 30), driver="gesvd"),
        "eigh 40x40": lambda: torch.linalg.eigh(sym + sym.mT),
        "eigvalsh f32 (syevj)": lambda: torch.linalg.eigvalsh((sym + sym.mT).float()),
        "eigh batched 4x8x8": lambda: torch.linalg.eigh((lambda s: s + s.mT)(rand(4, 8, 8))),
        "lstsq 50x20": lambda: torch.linalg.lstsq(rand(50, 20), rand(50, 2)).solution,
        "sparse.mm csr": lambda: torch.sparse.mm(sparse.cuda().to_sparse_csr(), dense),
        "sparse.mm coo": lambda: torch.sparse.mm(sparse.cuda().to_sparse(), dense),
        "csr @ vector": lambda: sparse.cuda().to_sparse_csr() @ dense[:, 0],
        # cuBLAS Level 2/3 beyond real GEMM: trsm, complex getrs/trsm, complex gemm and gemv
        "solve_triangular 40x40 x4": lambda: torch.linalg.solve_triangular(
            torch.triu(rand(40, 40)) + 40 * torch.eye(40, device="cuda", dtype=torch.float64), rand(40, 4), upper=True),
        "inv complex 24x24": lambda: torch.linalg.inv(rand(24, 24, dtype=torch.complex128)),
        "solve complex batched 3x12x12": lambda: torch.linalg.solve(rand(3, 12, 12, dtype=torch.complex64),
                                                                    rand(3, 12, 2, dtype=torch.complex64)),
        "matmul complex64": lambda: rand(30, 20, dtype=torch.complex64) @ rand(20, 10, dtype=torch.complex64),
        "matvec complex128": lambda: rand(30, 20, dtype=torch.complex128) @ rand(20, dtype=torch.complex128),
    }


def main() -> None:
    for library in ("default", "cusolver"):
        torch.backends.cuda.preferred_linalg_library(library)
        for name, op in inputs().items():
            try:
                out = op()
                torch.cuda.synchronize()
                print(f"[{library}] {name} OK {digest(out)}", flush=True)
            except Exception as e:  # noqa: BLE001 - every failure is a line of the report
                print(f"[{library}] {name} FAIL {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)


if __name__ == "__main__":
    main()
