"""The server's view of cuFFT plans: a plan description decoded from FFT_PLAN / FFT_ESTIMATE and checked the way
cuFFT checks it (refusals are cuFFT statuses, which go back to the program as answers), and the device ranges an
execution touches, computed from the description alone -- so a session's FFT reads and writes only its own
memory (docs/protocol.md, "Libraries").

Layouts follow cuFFT's rules. Basic layout (no embedding given): every transform is dense, one after the other;
an in-place real transform pads its real rows to 2 * (n_last // 2 + 1) elements (FFTW's layout, which cuFFT
uses for in-place data). Advanced layout: element (b, x0, x1, x2) of a side lies at
b * dist + stride * ((x0 * embed[1] + x1) * embed[2] + x2); embed[0] only sizes the array. cuFFT documents a
NULL embedding on one side only as "the basic layout", which can be read two ways: the ranges checked here cover
both readings, so that whichever cuFFT applies stays in the session's memory.
"""

from __future__ import annotations

import enum
import math

import attrs


class FftStatus(enum.IntEnum):
    """cufftResult values (cufft.h)."""

    SUCCESS = 0x0
    INVALID_PLAN = 0x1
    ALLOC_FAILED = 0x2
    INVALID_TYPE = 0x3
    INVALID_VALUE = 0x4
    INTERNAL_ERROR = 0x5
    EXEC_FAILED = 0x6
    SETUP_FAILED = 0x7
    INVALID_SIZE = 0x8
    UNALIGNED_DATA = 0x9
    INVALID_DEVICE = 0xB
    NO_WORKSPACE = 0xD
    NOT_IMPLEMENTED = 0xE
    NOT_SUPPORTED = 0x10


class Refused(Exception):
    """cuFFT would refuse this plan or execution with `status`."""

    def __init__(self, status: FftStatus, message: str):
        super().__init__(message)
        self.status = status


# cudaDataType values cuFFT takes: (is complex, bytes of one real component, the component's format).
R_16F, C_16F, R_16BF, C_16BF, R_32F, C_32F, R_64F, C_64F = 2, 6, 14, 15, 0, 4, 1, 5
DATA_TYPES = {R_16F: (False, 2, "f16"), C_16F: (True, 2, "f16"), R_16BF: (False, 2, "bf16"),
              C_16BF: (True, 2, "bf16"), R_32F: (False, 4, "f32"), C_32F: (True, 4, "f32"), R_64F: (False, 8, "f64"),
              C_64F: (True, 8, "f64")}
# cufftType -> (input type, output type, execution type); the exec functions take the same numbers.
C2C, R2C, C2R, Z2Z, D2Z, Z2D = 0x29, 0x2A, 0x2C, 0x69, 0x6A, 0x6C
LEGACY_TYPES = {C2C: (C_32F, C_32F, C_32F), R2C: (R_32F, C_32F, C_32F), C2R: (C_32F, R_32F, C_32F),
                Z2Z: (C_64F, C_64F, C_64F), D2Z: (R_64F, C_64F, C_64F), Z2D: (C_64F, R_64F, C_64F)}
XT_EXEC = 0  # FFT_EXEC's kind for cufftXtExec
FORWARD, INVERSE = -1, 1
MAX_RANK = 3
# No transform has more elements than this (batch included): every size derived from it fits in 64 bits.
MAX_ELEMENTS = 1 << 48


@attrs.frozen(slots=True)
class Layout:
    """One side of a transform: its logical dimensions and where element (b, x0, ...) lies, in elements."""

    dims: tuple[int, ...]
    embed: tuple[int, ...]
    stride: int
    dist: int
    batch: int

    def extent(self) -> int:
        """Elements from the side's first element to one past the last it can reach."""
        pitch, reach = 1, 0
        for d, e in zip(reversed(self.dims), reversed(self.embed)):
            reach += (d - 1) * pitch
            pitch *= e
        return (self.batch - 1) * self.dist + self.stride * reach + 1

    def pitches(self) -> tuple[int, ...]:
        """Elements between neighbours along each dimension (the batch dimension first)."""
        out, pitch = [], self.stride
        for e in reversed(self.embed):
            out.append(pitch)
            pitch *= e
        return (self.dist, *reversed(out))


def transform_kind(input_type: int, output_type: int, exec_type: int) -> str:
    """"C2C", "R2C" or "C2R"; Refused unless the three data types make one of them, in one precision."""
    types = (input_type, output_type, exec_type)
    if any(t not in DATA_TYPES for t in types) or len({DATA_TYPES[t][2] for t in types}) != 1:
        raise Refused(FftStatus.INVALID_TYPE, f"data types {types}")
    complex_in, complex_out = DATA_TYPES[input_type][0], DATA_TYPES[output_type][0]
    if not (complex_in or complex_out):
        raise Refused(FftStatus.INVALID_TYPE, f"real to real ({types})")
    return "C2C" if complex_in and complex_out else "R2C" if complex_out else "C2R"


@attrs.frozen(slots=True)
class Plan:
    plan_type: int  # the legacy cufftType, 0 for a cufftXt plan
    input_type: int
    output_type: int
    exec_type: int
    kind: str  # "C2C", "R2C" or "C2R"
    n: tuple[int, ...]
    inembed: tuple[int, ...] | None
    istride: int
    idist: int
    onembed: tuple[int, ...] | None
    ostride: int
    odist: int
    batch: int

    @classmethod
    def from_request(cls, r) -> Plan:
        """From a decoded FFT_PLAN / FFT_ESTIMATE request; Refused with cuFFT's status when cuFFT would refuse."""
        if r.plan_type:
            if r.plan_type not in LEGACY_TYPES:
                raise Refused(FftStatus.INVALID_TYPE, f"cufftType 0x{r.plan_type:x}")
            if (r.input_type, r.output_type, r.exec_type) != LEGACY_TYPES[r.plan_type]:
                raise Refused(FftStatus.INVALID_TYPE, f"data types of cufftType 0x{r.plan_type:x} do not match it")
        if not 1 <= r.rank <= MAX_RANK:
            raise Refused(FftStatus.INVALID_VALUE, f"rank {r.rank}")  # cuFFT's answer to rank 4 (measured)
        n = (r.n0, r.n1, r.n2)[: r.rank]
        if min(n) < 1 or r.batch < 1:
            raise Refused(FftStatus.INVALID_SIZE, f"sizes {n}, batch {r.batch}")
        if math.prod(n) * r.batch > MAX_ELEMENTS:
            raise Refused(FftStatus.INVALID_SIZE, f"{math.prod(n)} x {r.batch} elements")
        inembed = (r.inembed0, r.inembed1, r.inembed2)[: r.rank] if r.in_embed else None
        onembed = (r.onembed0, r.onembed1, r.onembed2)[: r.rank] if r.out_embed else None
        if inembed is not None or onembed is not None:
            # Only an advanced layout reads strides and distances; an embedding of 0 in dimension 0 is common
            # (it only sizes the array), negative numbers are not addresses.
            if min(r.istride, r.ostride) < 1 or min(r.idist, r.odist) < 0 or min((*(inembed or ()),
                                                                                  *(onembed or ()))) < 0:
                raise Refused(FftStatus.INVALID_VALUE, f"strides {r.istride}/{r.ostride}, distances "
                                                       f"{r.idist}/{r.odist}, embeddings {inembed}/{onembed}")
            if max(r.istride, r.ostride, r.idist, r.odist, *(inembed or ()), *(onembed or ())) > MAX_ELEMENTS:
                raise Refused(FftStatus.INVALID_SIZE, "a stride, distance or embedding beyond 2^48 elements")
        return cls(r.plan_type, r.input_type, r.output_type, r.exec_type,
                   transform_kind(r.input_type, r.output_type, r.exec_type), n, inembed, r.istride, r.idist, onembed,
                   r.ostride, r.odist, r.batch)

    # -- the transform ------------------------------------------------------------------------------------

    @property
    def precision(self) -> int:
        """Bytes of one real component: 2, 4 or 8."""
        return DATA_TYPES[self.exec_type][1]

    @property
    def component(self) -> str:
        """The components' format: "f16", "bf16", "f32" or "f64"."""
        return DATA_TYPES[self.exec_type][2]

    @property
    def rank(self) -> int:
        return len(self.n)

    def element_size(self, data_type: int) -> int:
        is_complex, component, _ = DATA_TYPES[data_type]
        return component * (2 if is_complex else 1)

    def dims(self, data_type: int) -> tuple[int, ...]:
        """A side's logical dimensions: the complex side of a real transform holds n_last // 2 + 1."""
        if self.kind != "C2C" and DATA_TYPES[data_type][0]:
            return (*self.n[:-1], self.n[-1] // 2 + 1)
        return self.n

    def layouts(self, in_place: bool, basic: bool | None = None) -> tuple[Layout, Layout]:
        """(input, output) layouts; `basic` forces a reading (None: the one the fake backend computes with)."""
        if basic is None:
            basic = self.inembed is None and self.onembed is None
        sides = []
        for data_type, embed, stride, dist in ((self.input_type, self.inembed, self.istride, self.idist),
                                               (self.output_type, self.onembed, self.ostride, self.odist)):
            dims = self.dims(data_type)
            if basic:
                padded = in_place and self.kind != "C2C" and not DATA_TYPES[data_type][0]
                embed = (*dims[:-1], 2 * (dims[-1] // 2 + 1)) if padded else dims
                sides.append(Layout(dims, embed, 1, math.prod(embed), self.batch))
            else:
                sides.append(Layout(dims, embed if embed is not None else dims, stride, dist, self.batch))
        return sides[0], sides[1]

    def ranges(self, input_ptr: int, output_ptr: int) -> list[tuple[int, int]]:
        """(pointer, bytes) of everything an execution may read or write, whichever layout cuFFT reads."""
        in_place = input_ptr == output_ptr
        readings = {True} if self.inembed is None and self.onembed is None else {
            False, self.inembed is None or self.onembed is None}
        in_bytes = out_bytes = 0
        for basic in readings:
            i, o = self.layouts(in_place, basic)
            in_bytes = max(in_bytes, i.extent() * self.element_size(self.input_type))
            out_bytes = max(out_bytes, o.extent() * self.element_size(self.output_type))
        if in_place:
            return [(input_ptr, max(in_bytes, out_bytes))]
        return [(input_ptr, in_bytes), (output_ptr, out_bytes)]

    def check_exec(self, kind: int, direction: int) -> None:
        """Refused unless the exec function is one cuFFT has and, for complex transforms, the direction is
        CUFFT_FORWARD or CUFFT_INVERSE. An exec function of another type than the plan's is accepted, as NVIDIA's
        cuFFT accepts it (measured on the H200): the plan's transform runs, over the extents checked for it."""
        if kind != XT_EXEC and kind not in LEGACY_TYPES:
            raise Refused(FftStatus.INVALID_VALUE, f"exec function for cufftType 0x{kind:x}")
        if self.kind == "C2C" and direction not in (FORWARD, INVERSE):
            raise Refused(FftStatus.INVALID_VALUE, f"direction {direction}")
