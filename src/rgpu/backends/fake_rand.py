"""cuRAND for the fake backend, in numpy: statistically right, not NVIDIA's sequences.

Pseudorandom generators draw from a Philox bit generator keyed by (type, seed) and advanced by the offset;
quasirandom ones give each dimension a base-2 van der Corput sequence (Sobol's first dimension), XOR-shifted by a
constant of the dimension (and of the scrambling), laid out dimension by dimension as cuRAND lays out its
results. The checks cuRAND makes before generating are rand_wire's."""

from __future__ import annotations

import statistics

import attrs
import numpy as np

from rgpu.protocol import rand_wire
from rgpu.protocol.rand_wire import Draw, RandStatus, Setting

_inv_cdf = np.frompyfunc(statistics.NormalDist().inv_cdf, 1, 1)


@attrs.define(eq=False)
class FakeGenerator:
    type: int
    host: bool
    seed: int = 0
    offset: int = 0
    dimensions: int = 1
    bits: np.random.Generator | None = None  # pseudorandom state, made at the first draw after a setting
    position: int = 0  # quasirandom: points drawn per dimension since the offset

    def reset(self) -> None:
        self.bits, self.position = None, 0

    def pseudo(self) -> np.random.Generator:
        if self.bits is None:
            philox = np.random.Philox(key=[self.seed & (2**64 - 1), self.type])
            philox.advance(self.offset)
            self.bits = np.random.Generator(philox)
        return self.bits


def _bit_reverse(x: np.ndarray, bits: int) -> np.ndarray:
    out = np.zeros_like(x)
    for i in range(bits):
        out |= ((x >> np.uint64(i)) & np.uint64(1)) << np.uint64(bits - 1 - i)
    return out


def _quasi(g: FakeGenerator, kind: Draw, count: int) -> np.ndarray:
    """(dimensions, count / dimensions) points, as unsigned integers of the generator's width."""
    per_dim = count // g.dimensions
    wide = rand_wire.is_quasi64(g.type)
    bits = 64 if wide else 32
    start = g.offset // g.dimensions + g.position + 1  # Sobol's point 0 is 0, outside (0, 1]
    index = np.arange(start, start + per_dim, dtype=np.uint64)
    base = _bit_reverse(index ^ (index >> np.uint64(1)), bits)
    scrambled = g.type in (rand_wire.SCRAMBLED_SOBOL32, rand_wire.SCRAMBLED_SOBOL64)
    shifts = np.array([(d * 0x9E3779B97F4A7C15 + (0x5BD1E995 if scrambled else 0)) % (1 << bits) if d or scrambled
                       else 0 for d in range(g.dimensions)], dtype=np.uint64)
    g.position += per_dim
    return base[None, :] ^ shifts[:, None]


def _uniform_from(points: np.ndarray, bits: int) -> np.ndarray:
    """Integers -> (0, 1): each point's cell centre, so the inverse normal CDF stays finite."""
    return (points.astype(np.float64) + 0.5) / float(1 << bits)


def draw(g: FakeGenerator, kind: Draw, count: int, a: float, b: float) -> np.ndarray:
    """`count` results, as the array cuRAND writes (the call passed rand_wire.generate_status)."""
    if rand_wire.is_quasi(g.type):
        bits = 64 if rand_wire.is_quasi64(g.type) else 32
        points = _quasi(g, kind, count).reshape(-1)
        if kind in (Draw.U32, Draw.U64):
            return points.astype(np.uint64 if bits == 64 else np.uint32)
        uniform = _uniform_from(points, bits)
        if kind == Draw.POISSON:
            return np.random.Generator(np.random.Philox(key=[g.position, g.type])).poisson(a, count).astype(np.uint32)
        normal = (_inv_cdf(uniform).astype(np.float64) * b + a) if kind not in (Draw.UNIFORM, Draw.UNIFORM_DOUBLE) else None
    else:
        rng = g.pseudo()
        if kind == Draw.U32:
            return rng.integers(0, 1 << 32, count, dtype=np.uint32)
        if kind == Draw.POISSON:
            return rng.poisson(a, count).astype(np.uint32)
        uniform = 1.0 - rng.random(count)  # (0, 1], as cuRAND's
        normal = rng.normal(a, b, count) if kind not in (Draw.UNIFORM, Draw.UNIFORM_DOUBLE) else None
    dtype = np.float64 if kind.size == 8 else np.float32
    if kind in (Draw.UNIFORM, Draw.UNIFORM_DOUBLE):
        return uniform.astype(dtype)
    if kind in (Draw.LOG_NORMAL, Draw.LOG_NORMAL_DOUBLE):
        return np.exp(normal).astype(dtype)
    return normal.astype(dtype)


class FakeRand:
    """Mixed into FakeBackend (which provides `_blas_view`)."""

    def rand_create(self, ctx, rng_type: int, host: bool):
        ctx.check()
        if rng_type not in rand_wire.RNG_TYPES:
            return None, RandStatus.TYPE_ERROR
        return FakeGenerator(rand_wire.RNG_TYPES[rng_type], host), RandStatus.SUCCESS

    def rand_destroy(self, ctx, gen) -> None:
        pass

    def rand_set(self, ctx, gen: FakeGenerator, what: Setting, value: int) -> int:
        status = rand_wire.setting_status(gen.type, what, value, gen.host)
        if status:
            return status
        if what == Setting.SEED:
            gen.seed = value
        elif what == Setting.OFFSET:
            gen.offset = value
        elif what == Setting.DIMENSIONS:
            gen.dimensions = value
        gen.reset()
        return RandStatus.SUCCESS

    def rand_generate(self, ctx, gen: FakeGenerator, stream, kind: Draw, output: int, count: int, a: float,
                      b: float) -> None:
        ctx.check()
        status = rand_wire.generate_status(gen.type, gen.dimensions, kind, count, a)
        if status:
            raise rand_wire.error(status, kind.function)
        if count:
            values = draw(gen, kind, count, a, b)
            self._blas_view(output, values.nbytes)[:] = values.view(np.uint8)

    def rand_generate_host(self, ctx, gen: FakeGenerator, kind: Draw, count: int, a: float, b: float):
        status = rand_wire.generate_status(gen.type, gen.dimensions, kind, count, a)
        if status or not count:
            return status, b""
        return RandStatus.SUCCESS, draw(gen, kind, count, a, b).tobytes()
