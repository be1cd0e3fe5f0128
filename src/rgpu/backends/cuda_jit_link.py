"""JIT linking on the real driver: the CudaBackend mixin (requests are checked in rgpu.dispatch.jit_link).

Through cffi, not cuda-bindings: the driver writes its logs into buffers given at cuLinkCreate, and the logs'
sizes and the wall time into that call's option values, for as long as the link lives; so the link keeps those
arrays itself, and reads them after each call."""

from __future__ import annotations

import attrs
import cffi

from rgpu.backends.cuda_common import check_code, driver

_ffi = cffi.FFI()
_ffi.cdef("""
    int cuLinkCreate_v2(unsigned int n, int *options, void **values, void **state);
    int cuLinkAddData_v2(void *state, int type, void *data, size_t size, const char *name, unsigned int n,
                         int *options, void **values);
    int cuLinkComplete(void *state, void **image, size_t *size);
    int cuLinkDestroy(void *state);
""")
_WALL_TIME, _INFO_LOG, _INFO_LOG_SIZE, _ERROR_LOG, _ERROR_LOG_SIZE = 2, 3, 4, 5, 6


@attrs.define(eq=False)
class CudaLink:
    state: object  # the driver's CUlinkState
    # Kept alive with the state: the driver writes into them until cuLinkDestroy.
    options: object
    values: object
    info: object
    error: object
    info_size: int
    error_size: int
    wall_at: int  # which value the driver writes CU_JIT_WALL_TIME's float into


def _option_arrays(pairs):
    options = _ffi.new("int[]", [o for o, _ in pairs] or [0])
    values = _ffi.new("void *[]", [_ffi.cast("void *", v) for _, v in pairs] or [_ffi.NULL])
    return options, values


def _log(buffer, size: int) -> bytes:
    # The bytes the driver wrote, with their NUL; nothing while the log is empty.
    text = _ffi.string(buffer, size) if size else b""
    return text + b"\0" if text else b""


class CudaJitLink:
    """Mixed into CudaBackend."""

    def jit_link_create(self, ctx, options, info_size: int, error_size: int) -> CudaLink:
        self._use(ctx)
        info, error = _ffi.new("char[]", max(info_size, 1)), _ffi.new("char[]", max(error_size, 1))
        pairs = [*options, (_WALL_TIME, 0), (_INFO_LOG, int(_ffi.cast("uintptr_t", info))),
                 (_INFO_LOG_SIZE, info_size), (_ERROR_LOG, int(_ffi.cast("uintptr_t", error))),
                 (_ERROR_LOG_SIZE, error_size)]
        opts, values = _option_arrays(pairs)
        state = _ffi.new("void **")
        check_code(driver(_ffi).cuLinkCreate_v2(len(pairs), opts, values, state))
        return CudaLink(state[0], opts, values, info, error, info_size, error_size, len(options))

    def jit_link_add(self, ctx, link: CudaLink, input_type: int, data: bytes, name: str, options) -> None:
        self._use(ctx)
        if input_type == 1 and not data.endswith(b"\0"):
            data += b"\0"  # the driver reads PTX up to its NUL
        opts, values = _option_arrays(options)
        check_code(driver(_ffi).cuLinkAddData_v2(link.state, input_type, _ffi.from_buffer(data), len(data),
                                                 name.encode(), len(options), opts, values))

    def jit_link_complete(self, ctx, link: CudaLink) -> bytes:
        self._use(ctx)
        image, size = _ffi.new("void **"), _ffi.new("size_t *")
        check_code(driver(_ffi).cuLinkComplete(link.state, image, size))
        return bytes(_ffi.buffer(image[0], size[0]))

    def jit_link_outputs(self, link: CudaLink) -> tuple[bytes, bytes, float]:
        wall = _ffi.cast("float *", link.values + link.wall_at)[0]  # a float written over the value's first bytes
        return _log(link.info, link.info_size), _log(link.error, link.error_size), float(wall)

    def jit_link_destroy(self, ctx, link: CudaLink) -> None:
        self._use(ctx)
        check_code(driver(_ffi).cuLinkDestroy(link.state))
