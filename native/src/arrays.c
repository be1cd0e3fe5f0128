/* CUDA arrays (protocol 1.8): cuArrayCreate, cuArray3DCreate, their descriptors and destruction, and every copy
 * with an array at one end (cuMemcpy2D/3D and their async forms, cuMemcpyHtoA, AtoH, DtoA, AtoD, AtoA).
 *
 * An array is the server's handle; its descriptor stays here, so that cuArray*GetDescriptor (and the runtime's
 * cudaArrayGetInfo, its element sizes) are answered locally. A copy goes as MEMCPY_ARRAY requests of one slice
 * each (one per group of rows that fits a frame, where the host is an end: its rows travel packed, as MEMCPY_2D's
 * do). Asynchronous ones that bring nothing back are deferred. */
#include <stdlib.h>
#include <string.h>

#include "array_rows.h"
#include "keyed.h"
#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))

static struct rgpu_keyed arrays = RGPU_KEYED_INIT;
RGPU_FORK_RESET(arrays_lock, &arrays.lock)

static CUresult need_arrays(void)
{
    static int logged;
    CUresult r = rgpu_ready();
    return r == CUDA_SUCCESS ? rgpu_need_protocol(8, &logged, "CUDA arrays") : r;
}

static CUresult create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    if (!out || !d)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = need_arrays();
    if (r != CUDA_SUCCESS)
        return r;
    uint8_t a[RGPU_ARRAY_CREATE_REQ_SIZE], rep[RGPU_ARRAY_CREATE_REP_SIZE];
    struct rgpu_array_create_rep got;
    rgpu_pack_array_create(a, &(struct rgpu_array_create_req){d->Width, d->Height, d->Depth, (uint32_t)d->Format,
                                                               d->NumChannels, d->Flags});
    r = rgpu_call(RGPU_OP_ARRAY_CREATE, a, sizeof a, NULL, 0, rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS && rgpu_unpack_array_create(rep, sizeof rep, &got) != 0)
        return rgpu_bad_reply(RGPU_OP_ARRAY_CREATE, "no array handle");
    if (r == CUDA_SUCCESS && (!got.array || rgpu_keyed_put(&arrays, got.array, d, sizeof *d) != 0)) {
        uint8_t gone[RGPU_ARRAY_DESTROY_REQ_SIZE];
        rgpu_pack_array_destroy(gone, &(struct rgpu_array_destroy_req){got.array});
        rgpu_call(RGPU_OP_ARRAY_DESTROY, gone, sizeof gone, NULL, 0, NULL, 0, NULL);
        return got.array ? CUDA_ERROR_OUT_OF_MEMORY : rgpu_bad_reply(RGPU_OP_ARRAY_CREATE, "array handle 0");
    }
    if (r == CUDA_SUCCESS)
        *out = (CUarray)(uintptr_t)got.array;
    return r;
}

API CUresult cuArray3DCreate_v2(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d) { return create(out, d); }

API CUresult cuArrayCreate_v2(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *d)
{
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d3 = {d->Width, d->Height, 0, d->Format, d->NumChannels, 0};
    return create(out, &d3);
}

API CUresult cuArrayDestroy(CUarray array)
{
    if (rgpu_keyed_take(&arrays, (uint64_t)(uintptr_t)array, NULL, 0) != 0)
        return CUDA_ERROR_INVALID_HANDLE;
    uint8_t a[RGPU_ARRAY_DESTROY_REQ_SIZE];
    rgpu_pack_array_destroy(a, &(struct rgpu_array_destroy_req){(uint64_t)(uintptr_t)array});
    return rgpu_call(RGPU_OP_ARRAY_DESTROY, a, sizeof a, NULL, 0, NULL, 0, NULL);
}

API CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray array)
{
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    return rgpu_keyed_get(&arrays, (uint64_t)(uintptr_t)array, d, sizeof *d) ? CUDA_ERROR_INVALID_HANDLE
                                                                              : CUDA_SUCCESS;
}

API CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *d, CUarray array)
{
    CUDA_ARRAY3D_DESCRIPTOR d3;
    CUresult r = d ? cuArray3DGetDescriptor_v2(&d3, array) : CUDA_ERROR_INVALID_VALUE;
    if (r == CUDA_SUCCESS)
        *d = (CUDA_ARRAY_DESCRIPTOR){d3.Width, d3.Height, d3.Format, d3.NumChannels};
    return r;
}

/* -- copies ------------------------------------------------------------------------------------------------ */
enum { END_HOST = 1, END_DEVICE = 2, END_ARRAY = 3 };

/* One end of a copy: an array (`at` its handle, x in bytes, y, z), or linear memory whose row `row` of the copy is
 * at `base + row * pitch` (host memory at the program's address, device memory at the server's). */
struct end {
    int type;
    uint64_t at, x, y, z, pitch, slice_rows;
};

static CUresult end_of(CUmemorytype type, const void *host, CUdeviceptr device, CUarray array, size_t x, size_t y,
                       size_t z, size_t pitch, size_t height, size_t width, struct end *e)
{
    if (type == CU_MEMORYTYPE_UNIFIED) { /* (the address is in the device field; the host one is ignored) */
        host = (const void *)(uintptr_t)device;
        type = rgpu_is_device_range(device, 1) ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    }
    if (type == CU_MEMORYTYPE_ARRAY) {
        *e = (struct end){END_ARRAY, (uint64_t)(uintptr_t)array, x, y, z, 0, 0};
        return array ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    }
    if ((type != CU_MEMORYTYPE_HOST && type != CU_MEMORYTYPE_DEVICE) || (type == CU_MEMORYTYPE_HOST && !host))
        return CUDA_ERROR_INVALID_VALUE;
    size_t rows, offset;
    if (!pitch)
        pitch = width;
    if (pitch < width || __builtin_mul_overflow(z, height, &rows) || __builtin_add_overflow(rows, y, &rows) ||
        __builtin_mul_overflow(rows, pitch, &offset) || __builtin_add_overflow(offset, x, &offset))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t base = type == CU_MEMORYTYPE_HOST ? (uint64_t)(uintptr_t)host : device;
    *e = (struct end){type == CU_MEMORYTYPE_HOST ? END_HOST : END_DEVICE, base + offset, 0, 0, 0, pitch, height};
    return CUDA_SUCCESS;
}

/* The wire's view of an end for rows [row, row + n) of slice k of the copy. */
static void place(const struct end *e, size_t k, size_t row, uint64_t *at, uint64_t *x, uint64_t *y, uint64_t *z,
                  uint64_t *pitch)
{
    if (e->type == END_ARRAY) {
        *at = e->at, *x = e->x, *y = e->y + row, *z = e->z + k, *pitch = 0;
    } else {
        *at = e->type == END_DEVICE ? e->at + (k * e->slice_rows + row) * e->pitch : 0;
        *x = *y = *z = 0;
        *pitch = e->pitch;
    }
}

static const uint8_t *host_rows(const struct end *e, size_t k, size_t row)
{
    return (const uint8_t *)(uintptr_t)(e->at + (k * e->slice_rows + row) * e->pitch);
}

static CUresult send_part(const struct end *src, const struct end *dst, size_t k, size_t row, size_t rows,
                          size_t width, CUstream stream, int async, uint8_t *buf)
{
    struct rgpu_memcpy_array_req req = {.kind = (uint32_t)(src->type | dst->type << 4), .width = width,
                                        .height = rows, .stream = rgpu_stream_handle(stream)};
    place(src, k, row, &req.src_at, &req.src_x, &req.src_y, &req.src_z, &req.src_pitch);
    place(dst, k, row, &req.dst_at, &req.dst_x, &req.dst_y, &req.dst_z, &req.dst_pitch);
    _Static_assert(RGPU_MEMCPY_ARRAY_REQ_SIZE == RGPU_MEMCPY_ARRAY_ASYNC_REQ_SIZE, "one request for two operations");
    uint8_t a[RGPU_MEMCPY_ARRAY_REQ_SIZE];
    rgpu_pack_memcpy_array(a, &req);
    const uint8_t *bulk = NULL;
    size_t n = rows * width;
    if (src->type == END_HOST) {
        bulk = host_rows(src, k, row);
        if (src->pitch != width) {
            for (size_t i = 0; i < rows; i++)
                memcpy(buf + i * width, bulk + i * src->pitch, width);
            bulk = buf;
        }
    }
    if (dst->type != END_HOST)
        return async ? rgpu_defer(RGPU_OP_MEMCPY_ARRAY_ASYNC, a, sizeof a, bulk, bulk ? n : 0)
                     : rgpu_call(RGPU_OP_MEMCPY_ARRAY, a, sizeof a, bulk, bulk ? n : 0, NULL, 0, NULL);
    uint8_t *land = dst->pitch == width ? (uint8_t *)host_rows(dst, k, row) : buf;
    struct rgpu_sink sink = {land, n, 0};
    CUresult r = rgpu_call(RGPU_OP_MEMCPY_ARRAY, a, sizeof a, NULL, 0, NULL, 0, &sink);
    if (r == CUDA_SUCCESS && sink.len != n)
        return rgpu_bad_reply(RGPU_OP_MEMCPY_ARRAY, "copied bytes");
    if (r == CUDA_SUCCESS && land == buf)
        for (size_t i = 0; i < rows; i++)
            memcpy((uint8_t *)host_rows(dst, k, row + i), buf + i * width, width);
    return r;
}

CUresult rgpu_array_copy(const CUDA_MEMCPY3D *p, CUstream stream, int async)
{
    struct end src, dst;
    size_t width = p->WidthInBytes, height = p->Height, depth = p->Depth;
    CUresult r = need_arrays();
    if (r != CUDA_SUCCESS)
        return r;
    if (!width || !height || !depth)
        return CUDA_SUCCESS;
    if ((r = end_of(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY, p->srcZ,
                    p->srcPitch, p->srcHeight ? p->srcHeight : height, width, &src)) != CUDA_SUCCESS ||
        (r = end_of(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY, p->dstZ,
                    p->dstPitch, p->dstHeight ? p->dstHeight : height, width, &dst)) != CUDA_SUCCESS)
        return r;
    if (src.type == END_HOST && dst.type == END_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    int host = src.type == END_HOST || dst.type == END_HOST;
    if (async && host && rgpu_capture_host_copy(stream))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    size_t chunk = rgpu_max_chunk(), rows = host ? chunk / width : height;
    if (!rows)
        return CUDA_ERROR_INVALID_VALUE; /* (a row wider than a frame: no array is that wide) */
    uint8_t *buf = host ? malloc((rows < height ? rows : height) * width) : NULL;
    if (host && !buf)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* (to the host, an "asynchronous" copy waits for its bytes: they must be in the program's memory on return
     * for the program to read after a synchronize, and nothing else would bring them) */
    int deferred = async && dst.type != END_HOST;
    for (size_t k = 0; k < depth && r == CUDA_SUCCESS; k++)
        for (size_t y = 0; y < height && r == CUDA_SUCCESS; y += rows)
            r = send_part(&src, &dst, k, y, height - y < rows ? height - y : rows, width, stream, deferred, buf);
    free(buf);
    return r;
}

/* Bytes in a row of `array` (its width of elements), 0 for an array this process does not know. */
static size_t row_bytes(CUarray array)
{
    static const unsigned formats[][2] = RGPU_ARRAY_FORMATS;
    CUDA_ARRAY3D_DESCRIPTOR d;
    if (rgpu_keyed_get(&arrays, (uint64_t)(uintptr_t)array, &d, sizeof d) != 0)
        return 0;
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (formats[i][0] == (unsigned)d.Format)
            return d.Width * formats[i][1] * d.NumChannels;
    return 0;
}

/* The 1D copies (cuMemcpyHtoA, AtoH, DtoA, AtoD) name a byte offset into the array that runs on from row to row:
 * the rest of the first row, the whole rows after it as one 2D copy, the start of the last. */
static CUresult linear(CUarray array, size_t offset, CUmemorytype other, const void *host, CUdeviceptr device,
                       size_t n, int to_array, CUstream stream, int async)
{
    size_t row = row_bytes(array);
    if (!row)
        return CUDA_ERROR_INVALID_VALUE;
    size_t x = offset % row, y = offset / row;
    for (size_t done = 0; done < n;) {
        struct array_piece p = array_next_piece(row, x, y, n - done);
        CUDA_MEMCPY3D c = {.WidthInBytes = p.width, .Height = p.rows, .Depth = 1};
        const uint8_t *h = host ? (const uint8_t *)host + done : NULL;
        if (to_array) {
            c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = array, c.dstXInBytes = p.x, c.dstY = p.y;
            c.srcMemoryType = other, c.srcHost = h, c.srcDevice = device + done, c.srcPitch = row;
        } else {
            c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = array, c.srcXInBytes = p.x, c.srcY = p.y;
            c.dstMemoryType = other, c.dstHost = (void *)h, c.dstDevice = device + done, c.dstPitch = row;
        }
        CUresult r = rgpu_array_copy(&c, stream, async);
        if (r != CUDA_SUCCESS)
            return r;
        done += p.width * p.rows;
        array_after_piece(row, &p, &x, &y);
    }
    return CUDA_SUCCESS;
}

API CUresult cuMemcpyHtoA_v2(CUarray dst, size_t off, const void *src, size_t n)
{
    return src ? linear(dst, off, CU_MEMORYTYPE_HOST, src, 0, n, 1, NULL, 0) : CUDA_ERROR_INVALID_VALUE;
}
API CUresult cuMemcpyHtoAAsync_v2(CUarray dst, size_t off, const void *src, size_t n, CUstream s)
{
    return src ? linear(dst, off, CU_MEMORYTYPE_HOST, src, 0, n, 1, s, 1) : CUDA_ERROR_INVALID_VALUE;
}
API CUresult cuMemcpyAtoH_v2(void *dst, CUarray src, size_t off, size_t n)
{
    return dst ? linear(src, off, CU_MEMORYTYPE_HOST, dst, 0, n, 0, NULL, 0) : CUDA_ERROR_INVALID_VALUE;
}
API CUresult cuMemcpyAtoHAsync_v2(void *dst, CUarray src, size_t off, size_t n, CUstream s)
{
    return dst ? linear(src, off, CU_MEMORYTYPE_HOST, dst, 0, n, 0, s, 1) : CUDA_ERROR_INVALID_VALUE;
}
API CUresult cuMemcpyDtoA_v2(CUarray dst, size_t off, CUdeviceptr src, size_t n)
{
    return linear(dst, off, CU_MEMORYTYPE_DEVICE, NULL, src, n, 1, NULL, 0);
}
API CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t off, size_t n)
{
    return linear(src, off, CU_MEMORYTYPE_DEVICE, NULL, dst, n, 0, NULL, 0);
}
/* Array to array: pieces within one row of each. */
API CUresult cuMemcpyAtoA_v2(CUarray dst, size_t dst_off, CUarray src, size_t src_off, size_t n)
{
    size_t srow = row_bytes(src), drow = row_bytes(dst);
    if (!srow || !drow)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t done = 0; done < n;) {
        size_t s = src_off + done, d = dst_off + done, width = n - done;
        if (width > srow - s % srow)
            width = srow - s % srow;
        if (width > drow - d % drow)
            width = drow - d % drow;
        CUDA_MEMCPY3D c = {.srcMemoryType = CU_MEMORYTYPE_ARRAY, .srcArray = src, .srcXInBytes = s % srow,
                           .srcY = s / srow, .dstMemoryType = CU_MEMORYTYPE_ARRAY, .dstArray = dst,
                           .dstXInBytes = d % drow, .dstY = d / drow, .WidthInBytes = width, .Height = 1, .Depth = 1};
        CUresult r = rgpu_array_copy(&c, NULL, 0);
        if (r != CUDA_SUCCESS)
            return r;
        done += width;
    }
    return CUDA_SUCCESS;
}

API CUresult cuMemcpyHtoA_v2_ptds(CUarray dst, size_t off, const void *src, size_t n)
{
    return cuMemcpyHtoA_v2(dst, off, src, n);
}
API CUresult cuMemcpyHtoAAsync_v2_ptsz(CUarray dst, size_t off, const void *src, size_t n, CUstream s)
{
    return cuMemcpyHtoAAsync_v2(dst, off, src, n, s);
}
API CUresult cuMemcpyAtoH_v2_ptds(void *dst, CUarray src, size_t off, size_t n)
{
    return cuMemcpyAtoH_v2(dst, src, off, n);
}
API CUresult cuMemcpyAtoHAsync_v2_ptsz(void *dst, CUarray src, size_t off, size_t n, CUstream s)
{
    return cuMemcpyAtoHAsync_v2(dst, src, off, n, s);
}
API CUresult cuMemcpyDtoA_v2_ptds(CUarray dst, size_t off, CUdeviceptr src, size_t n)
{
    return cuMemcpyDtoA_v2(dst, off, src, n);
}
API CUresult cuMemcpyAtoD_v2_ptds(CUdeviceptr dst, CUarray src, size_t off, size_t n)
{
    return cuMemcpyAtoD_v2(dst, src, off, n);
}
API CUresult cuMemcpyAtoA_v2_ptds(CUarray dst, size_t dst_off, CUarray src, size_t src_off, size_t n)
{
    return cuMemcpyAtoA_v2(dst, dst_off, src, src_off, n);
}
