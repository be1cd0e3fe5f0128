"""The server's view of cuRAND requests (RAND_* operations): what the numbers in them mean, and the checks cuRAND
makes before it generates (the fake backend makes them; on a GPU the real library does)."""

from __future__ import annotations

import enum

from rgpu.errors import CudaError, Status


class RandStatus(enum.IntEnum):
    """curandStatus_t."""

    SUCCESS = 0
    VERSION_MISMATCH = 100
    NOT_INITIALIZED = 101
    ALLOCATION_FAILED = 102
    TYPE_ERROR = 103
    OUT_OF_RANGE = 104
    LENGTH_NOT_MULTIPLE = 105
    DOUBLE_PRECISION_REQUIRED = 106
    LAUNCH_FAILURE = 201
    PREEXISTING_FAILURE = 202
    INITIALIZATION_FAILED = 203
    ARCH_MISMATCH = 204
    INTERNAL_ERROR = 999


def status_name(status: int) -> str:
    try:
        return "CURAND_STATUS_" + RandStatus(status).name
    except ValueError:
        return f"curand status {status}"


# curandRngType_t: the defaults resolve to XORWOW and SOBOL32, as in cuRAND.
PSEUDO_DEFAULT, XORWOW, MRG32K3A, MTGP32, MT19937, PHILOX = 100, 101, 121, 141, 142, 161
QUASI_DEFAULT, SOBOL32, SCRAMBLED_SOBOL32, SOBOL64, SCRAMBLED_SOBOL64 = 200, 201, 202, 203, 204
RNG_TYPES = {PSEUDO_DEFAULT: XORWOW, XORWOW: XORWOW, MRG32K3A: MRG32K3A, MTGP32: MTGP32, MT19937: MT19937,
             PHILOX: PHILOX, QUASI_DEFAULT: SOBOL32, SOBOL32: SOBOL32, SCRAMBLED_SOBOL32: SCRAMBLED_SOBOL32,
             SOBOL64: SOBOL64, SCRAMBLED_SOBOL64: SCRAMBLED_SOBOL64}
# The orderings each pseudorandom type takes (BEST 100, DEFAULT 101, SEEDED 102, LEGACY 103), and the types that
# take no offset, as NVIDIA's libcurand 10.4 answers for host generators (tests/test_rand.py asks it). Its device
# generators may take DYNAMIC (104) too; the fake refuses it.
PSEUDO_ORDERINGS = {XORWOW: frozenset({100, 101, 102, 103}), MRG32K3A: frozenset({100, 101, 103}),
                    MTGP32: frozenset({100, 101, 103}), MT19937: frozenset({101, 103}), PHILOX: frozenset({100, 101, 103})}
# Device generators take more than the host ones: an MT19937 device generator took BEST (100) on the H200
# (rand_check bad, 2026-12-03), where the host generator refuses it.
DEVICE_ORDERINGS = {MT19937: frozenset({100})}
NO_OFFSET = frozenset({MTGP32, MT19937})
# The pseudorandom types whose normals come in pairs (Box-Muller), so an odd count is LENGTH_NOT_MULTIPLE.
PAIRED_NORMALS = frozenset({XORWOW, MRG32K3A})
QUASI_ORDERING = 201
MAX_DIMENSIONS = 20000


def is_quasi(rng_type: int) -> bool:
    return rng_type >= QUASI_DEFAULT


def is_quasi64(rng_type: int) -> bool:
    return rng_type in (SOBOL64, SCRAMBLED_SOBOL64)


class Setting(enum.IntEnum):
    """RAND_SET's `what`."""

    SEED = 1
    OFFSET = 2
    ORDERING = 3
    DIMENSIONS = 4
    SEEDS = 5  # curandGenerateSeeds


class Draw(enum.IntEnum):
    """RAND_GENERATE's `kind`: the curandGenerate* call, and the size of one result."""

    U32 = 0
    U64 = 1
    UNIFORM = 2
    UNIFORM_DOUBLE = 3
    NORMAL = 4
    NORMAL_DOUBLE = 5
    LOG_NORMAL = 6
    LOG_NORMAL_DOUBLE = 7
    POISSON = 8

    @property
    def size(self) -> int:
        return 8 if self in (Draw.U64, Draw.UNIFORM_DOUBLE, Draw.NORMAL_DOUBLE, Draw.LOG_NORMAL_DOUBLE) else 4

    @property
    def function(self) -> str:
        return _FUNCTIONS[self]


_FUNCTIONS = {Draw.U32: "curandGenerate", Draw.U64: "curandGenerateLongLong", Draw.UNIFORM: "curandGenerateUniform",
              Draw.UNIFORM_DOUBLE: "curandGenerateUniformDouble", Draw.NORMAL: "curandGenerateNormal",
              Draw.NORMAL_DOUBLE: "curandGenerateNormalDouble", Draw.LOG_NORMAL: "curandGenerateLogNormal",
              Draw.LOG_NORMAL_DOUBLE: "curandGenerateLogNormalDouble", Draw.POISSON: "curandGeneratePoisson"}
_PAIRED = frozenset({Draw.NORMAL, Draw.NORMAL_DOUBLE, Draw.LOG_NORMAL, Draw.LOG_NORMAL_DOUBLE})

# A host generator's results travel in one reply: at most this many bytes per call (native/src/curand/rand.h).
MAX_HOST_BYTES = 16 << 20


def draw(kind: int) -> Draw:
    try:
        return Draw(kind)
    except ValueError:
        raise CudaError(Status.INVALID_VALUE, f"unknown cuRAND draw kind {kind}") from None


def generate_status(rng_type: int, dimensions: int, kind: Draw, count: int, a: float) -> RandStatus:
    """What cuRAND answers a generate call before it starts: a wrong generator type for the draw, a length that
    is not a multiple of the quasirandom dimensions (or odd, for normals of XORWOW and MRG32k3a), a Poisson lambda
    out of range."""
    if (kind == Draw.U64) != is_quasi64(rng_type) and kind in (Draw.U32, Draw.U64):
        return RandStatus.TYPE_ERROR
    if count % dimensions if is_quasi(rng_type) else count % 2 and kind in _PAIRED and rng_type in PAIRED_NORMALS:
        return RandStatus.LENGTH_NOT_MULTIPLE
    if kind == Draw.POISSON and not 0 < a <= 400000:
        return RandStatus.OUT_OF_RANGE
    return RandStatus.SUCCESS


def setting_status(rng_type: int, what: int, value: int, host: bool = True) -> RandStatus:
    """cuRAND's answer to a setter on a (host or device) generator of `rng_type`."""
    quasi = is_quasi(rng_type)
    if what == Setting.SEED:
        return RandStatus.TYPE_ERROR if quasi else RandStatus.SUCCESS
    if what == Setting.ORDERING:
        extra = frozenset() if host else DEVICE_ORDERINGS.get(rng_type, frozenset())
        ok = value == QUASI_ORDERING if quasi else value in PSEUDO_ORDERINGS[rng_type] | extra
        return RandStatus.SUCCESS if ok else RandStatus.OUT_OF_RANGE
    if what == Setting.OFFSET:
        return RandStatus.TYPE_ERROR if rng_type in NO_OFFSET else RandStatus.SUCCESS
    if what == Setting.DIMENSIONS:
        if not quasi:
            return RandStatus.TYPE_ERROR
        return RandStatus.SUCCESS if 1 <= value <= MAX_DIMENSIONS else RandStatus.OUT_OF_RANGE
    if what == Setting.SEEDS:
        return RandStatus.SUCCESS
    raise CudaError(Status.INVALID_VALUE, f"unknown cuRAND setting {what}")


def error(status: int, what: str) -> CudaError:
    """A failed generation into device memory (deferred: the program sees it at its next synchronising call)."""
    code = {RandStatus.ALLOCATION_FAILED: Status.OUT_OF_MEMORY, RandStatus.LAUNCH_FAILURE: Status.LAUNCH_FAILED,
            RandStatus.NOT_INITIALIZED: Status.INVALID_HANDLE}.get(status, Status.INVALID_VALUE)
    return CudaError(code, f"{what}: {status_name(status)}")
