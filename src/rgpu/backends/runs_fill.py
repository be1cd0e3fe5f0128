"""The worker's one kernel of its own: rgpu_runs_fill, which writes a coded copy's destination on the device from
a plan in the copy ring's page-locked slots (native/src/copy_runs.h, rgpu_runs_plan; lane.c's htod_runs), instead
of the worker decoding the copy into the slots and the GPU copying the decoded bytes. llama.cpp sends 1 MiB of V
row indices a prompt step at flash attention off, 128 runs: decoding them costs the worker ~23 us and the GPU a
1 MiB copy before the step's graph; the plan takes ~1 us. Off unless RGPU_RUNS_FILL=1 (lane.fill_wanted): whether
it beats decoding on a GPU is not yet measured fairly (bench/results/gpu-2026-12-05f-levers).

PTX, written by hand and JIT-compiled by the driver in each context that makes a copy ring (ISA 6.0 for sm_50:
any driver since CUDA 9 takes it). One block per plan entry of 32 bytes -- first:u64 step:u64 source:u64
word:u32 words:u32 -- writing words [word, word + words) of dst: first + k * step, or where source is not 0 the
8-byte words at source (page-locked host memory, which the device reads at the host's address). The plan is the
worker's, made from a coding it checked, and every entry lies within the copy's checked destination; so the kernel
trusts it. The lane (native/src/lane/ring.c) launches blocks of RGPU_LANE_FILL_THREADS (lane.h).

native/tests/runs_check.c applies plans as this kernel does (tests/test_coded_copies.py), and so does the fake
backend; tests/gpu/test_coded_fill_gpu.py runs it on a GPU."""

from __future__ import annotations

NAME = b"rgpu_runs_fill"

PTX = b"""
.version 6.0
.target sm_50
.address_size 64

.visible .entry rgpu_runs_fill(
    .param .u64 plan,
    .param .u64 dst
)
{
    .reg .pred %literal, %done;
    .reg .b32 %entry, %word, %words, %k, %stride;
    .reg .b64 %e, %d, %first, %step, %source, %at, %v, %k64, %off;

    ld.param.u64 %e, [plan];
    ld.param.u64 %d, [dst];
    cvta.to.global.u64 %e, %e;
    cvta.to.global.u64 %d, %d;
    mov.u32 %entry, %ctaid.x;
    mul.wide.u32 %off, %entry, 32;
    add.u64 %e, %e, %off;
    ld.global.u64 %first, [%e];
    ld.global.u64 %step, [%e+8];
    ld.global.u64 %source, [%e+16];
    ld.global.u32 %word, [%e+24];
    ld.global.u32 %words, [%e+28];
    setp.ne.u64 %literal, %source, 0;
    cvta.to.global.u64 %source, %source;
    mul.wide.u32 %off, %word, 8;
    add.u64 %d, %d, %off;
    mov.u32 %k, %tid.x;
    mov.u32 %stride, %ntid.x;
NEXT:
    setp.ge.u32 %done, %k, %words;
    @%done bra END;
    mul.wide.u32 %k64, %k, 8;
    @%literal bra LITERAL;
    cvt.u64.u32 %v, %k;
    mad.lo.u64 %v, %v, %step, %first;
    bra STORE;
LITERAL:
    add.u64 %at, %source, %k64;
    ld.global.u64 %v, [%at];
STORE:
    add.u64 %at, %d, %k64;
    st.global.u64 [%at], %v;
    add.u32 %k, %k, %stride;
    bra NEXT;
END:
    ret;
}
\x00"""
