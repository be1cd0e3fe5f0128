"""Diagnosis on the GPU box: read a captured graph back through the cuda backend (what GRAPH_GET_NODES does),
one node kind at a time, and print which driver call fails. `python3 tests/gpu/graph_nodes_probe.py`"""

import struct
import traceback

from rgpu.backends.cuda import CudaBackend
from rgpu.kernels import load

b = CudaBackend()
b.init()
ctx = b.ctx_create(0, 0)
mod = b.module_load(ctx, load("demo.ptx"))
vadd = b.module_get_function(ctx, mod, "vadd")
layout = b.func_param_info(ctx, vadd)
ptr = b.mem_alloc(ctx, 1 << 16)
params = struct.pack("<QQQi", ptr, ptr, ptr, 16).ljust(layout[-1][0] + layout[-1][1], b"\0")
stream = b.stream_create(ctx, 1)


def captured(kind):
    b.stream_begin_capture(ctx, stream, 2)
    if kind in ("memset", "both"):
        b.memset(ctx, ptr, 0, 1024, 4, stream, True)
    if kind in ("kernel", "both"):
        b.launch(ctx, vadd, (1, 1, 1), (32, 1, 1), 0, stream, params)
    return b.stream_end_capture(ctx, stream)


for kind in ("memset", "kernel", "both"):
    try:
        g = captured(kind)
        nodes = b.graph_nodes(ctx, g, lambda f: layout)
        print(kind, "OK", [(n.type, len(n.deps)) for n in nodes])
    except Exception:
        print(kind, "FAIL", traceback.format_exc())
