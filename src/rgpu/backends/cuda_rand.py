"""cuRAND's host API on the GPU, called through cffi (ABI mode: no headers needed on the server).

Library: $RGPU_CURAND names it; otherwise the nvidia-curand wheel on sys.path (as PyTorch installs it), then the
loader's own search for libcurand.so.10.
"""

from __future__ import annotations

import threading

import cffi

from rgpu.backends.cuda_common import stream as _stream
from rgpu.backends.nvlibs import open_library
from rgpu.protocol import rand_wire
from rgpu.protocol.rand_wire import Draw, Setting

_ffi = cffi.FFI()
_ffi.cdef("""
    int curandCreateGenerator(void **generator, unsigned int rng_type);
    int curandCreateGeneratorHost(void **generator, unsigned int rng_type);
    int curandDestroyGenerator(void *generator);
    int curandSetStream(void *generator, void *stream);
    int curandSetPseudoRandomGeneratorSeed(void *generator, unsigned long long seed);
    int curandSetGeneratorOffset(void *generator, unsigned long long offset);
    int curandSetGeneratorOrdering(void *generator, unsigned int order);
    int curandSetQuasiRandomGeneratorDimensions(void *generator, unsigned int dimensions);
    int curandGenerateSeeds(void *generator);
    int curandGenerate(void *generator, void *out, size_t n);
    int curandGenerateLongLong(void *generator, void *out, size_t n);
    int curandGenerateUniform(void *generator, void *out, size_t n);
    int curandGenerateUniformDouble(void *generator, void *out, size_t n);
    int curandGenerateNormal(void *generator, void *out, size_t n, float mean, float stddev);
    int curandGenerateNormalDouble(void *generator, void *out, size_t n, double mean, double stddev);
    int curandGenerateLogNormal(void *generator, void *out, size_t n, float mean, float stddev);
    int curandGenerateLogNormalDouble(void *generator, void *out, size_t n, double mean, double stddev);
    int curandGeneratePoisson(void *generator, void *out, size_t n, double lambda);
""")
_lock = threading.Lock()
_lib = None
_SETTERS = {Setting.SEED: "curandSetPseudoRandomGeneratorSeed", Setting.OFFSET: "curandSetGeneratorOffset",
            Setting.ORDERING: "curandSetGeneratorOrdering",
            Setting.DIMENSIONS: "curandSetQuasiRandomGeneratorDimensions"}


def library():
    global _lib
    with _lock:
        if _lib is None:
            _lib = open_library(_ffi, "RGPU_CURAND", "cu13", "libcurand.so.10")
        return _lib


def _draw(lib, gen, kind: Draw, out, count: int, a: float, b: float) -> int:
    fn = getattr(lib, kind.function)
    if kind in (Draw.U32, Draw.U64, Draw.UNIFORM, Draw.UNIFORM_DOUBLE):
        return fn(gen, out, count)
    if kind == Draw.POISSON:
        return fn(gen, out, count, a)
    return fn(gen, out, count, a, b)


class CudaRand:
    """Mixed into CudaBackend (which provides `_use`)."""

    def rand_create(self, ctx, rng_type: int, host: bool):
        lib = library()
        self._use(ctx)
        out = _ffi.new("void **")
        status = (lib.curandCreateGeneratorHost if host else lib.curandCreateGenerator)(out, rng_type)
        return (out[0] if status == 0 else None), status

    def rand_destroy(self, ctx, gen) -> None:
        self._use(ctx)
        status = library().curandDestroyGenerator(gen)
        if status:
            raise rand_wire.error(status, "curandDestroyGenerator")

    def rand_set(self, ctx, gen, what: Setting, value: int) -> int:
        lib = library()
        self._use(ctx)
        if what == Setting.SEEDS:
            return lib.curandGenerateSeeds(gen)
        return getattr(lib, _SETTERS[what])(gen, value)

    def rand_generate(self, ctx, gen, stream, kind: Draw, output: int, count: int, a: float, b: float) -> None:
        lib = library()
        self._use(ctx)
        status = lib.curandSetStream(gen, _ffi.cast("void *", int(_stream(stream))))
        if not status:
            status = _draw(lib, gen, kind, _ffi.cast("void *", output), count, a, b)
        if status:
            raise rand_wire.error(status, kind.function)

    def rand_generate_host(self, ctx, gen, kind: Draw, count: int, a: float, b: float):
        lib = library()
        self._use(ctx)
        out = _ffi.new("char[]", max(1, count * kind.size))
        status = _draw(lib, gen, kind, out, count, a, b)
        return status, (_ffi.buffer(out, count * kind.size)[:] if not status else b"")
