/* Internal interface of the driver shim (libcuda.so.1). */
#ifndef RGPU_SHIM_H
#define RGPU_SHIM_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "fork_locks.h"
#include "rgpu_consts.h"
#include "rgpu_log.h"
#include "rgpu_ops.h"
#include "rgpu_proc.h"
#include "rgpu_wire.h"

/* Reply bulk destination: bytes land in buf (up to cap); len says how many came. */
struct rgpu_sink {
    void *buf;
    size_t cap;
    size_t len;
};

/* One synchronous request/reply (flushes queued deferred calls first). */
CUresult rgpu_call(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len,
                   void *reply, size_t reply_len, struct rgpu_sink *sink);
/* `count` requests of opcode `op` (each args_len bytes of `args`, no bulk), whose replies' bulk land in
 * sinks[i]; up to `window` in flight, so the server prepares the next reply while this one is taken in.
 * Returns the first failure (later requests are then not sent). */
#define RGPU_MAX_WINDOW 8
CUresult rgpu_call_pipelined(uint16_t op, size_t count, const uint8_t *args, size_t args_len,
                             struct rgpu_sink *sinks, unsigned window);
/* A reply that does not fit what the caller asked for (a count, length or offset beyond it): logs, closes the
 * connection (the server is broken or hostile), and returns the failure every later call returns too. */
CUresult rgpu_bad_reply(uint16_t op, const char *what);
/* Queue a deferred call (batched); with RGPU_BATCH=0 it is a plain rgpu_call. */
CUresult rgpu_defer(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len);
/* Send the queued deferred calls now, without waiting for anything. */
CUresult rgpu_flush(void);
/* A STREAM_SYNCHRONIZE request sent without waiting, held back while only operations that may pass it follow. */
CUresult rgpu_defer_sync(const void *args, size_t args_len);
/* Whether device work sent on the current connection may still be running (conn_work.c). */
int rgpu_work_unfinished(void);
int rgpu_stream_known(uint64_t stream); /* the NULL stream, or one the current server made and did not destroy */
/* Connect + handshake once per process; later calls return the first outcome. */
CUresult rgpu_connect(void);
CUresult rgpu_ready(void); /* CUDA_ERROR_NOT_INITIALIZED before a successful cuInit */
/* The id the next request will take: every call or deferred call takes one, so an unchanged value means that
 * nothing at all was issued in between (sync.c answers stream synchronizations from it). */
uint32_t rgpu_request_seq(void);
/* client_stats.c (RGPU_CLIENT_STATS=1): a reply waited for since `since_ns` (rgpu_now_ns), frames sent. */
void rgpu_stats_waited(uint64_t since_ns);
void rgpu_stats_sent(uint64_t nframes, uint64_t nbytes);
/* Changes whenever a request that may put something on `stream` is issued (the NULL stream: any request). */
uint32_t rgpu_stream_seq(uint64_t stream);
uint32_t rgpu_max_chunk(void);
uint32_t rgpu_max_bulk(void); /* the most bytes one request's bulk may carry */
/* a deferred host-to-device copy of n bytes: its records' bulk (smaller with a PSK, unless copy links carry it;
 * conn_context.c) */
uint32_t rgpu_htod_chunk(size_t n);
/* Coded copies (copy_coded.c): whether an asynchronous copy up of n bytes is worth coding; rgpu_htod_coded sends
 * one piece of at most RGPU_RUNS_MAX_COPY_BYTES coded, deferred, and returns 1 with *r what sending it gave, or
 * returns 0, having sent nothing, when the bytes do not code small enough. */
int rgpu_coded_copies(size_t n);
int rgpu_htod_coded(CUdeviceptr dst, const void *src, size_t n, uint64_t stream, CUresult *r);
uint16_t rgpu_server_minor(void); /* the server's protocol minor version (newer operations need >= 1) */
/* stream_memops.c: a device's attributes (by id) as fetched from the current server: those offering stream memory
 * operations read 0 where that server cannot take them. */
void rgpu_memops_offered(int32_t *attrs);

/* Device ranges the shim was given (memory.c): pointer queries, unified copies, deferrable copies. */
void rgpu_ranges_note_device(uint64_t start, uint64_t size, uint64_t ctx);
void rgpu_ranges_drop_ctx(uint64_t ctx);
void rgpu_ranges_drop_device_within(uint64_t start, uint64_t size); /* every range starting in [start, start+size) */
int rgpu_is_device_range(uint64_t ptr, uint64_t n);
int rgpu_ctx_device(uint64_t ctx); /* device ordinal of a context, -1 if unknown */
int rgpu_sha256(const void *data, size_t len, uint8_t out[32]); /* always 0 */

/* Several servers (conn_route.c): which server made a handle / holds a device address / has a device, -1 for
 * none known; rgpu_route_push sends this thread's calls to one server until rgpu_route_pop (calls that must
 * go there whatever they name: copies across servers). With one server every answer is 0. */
int rgpu_server_count(void);
int rgpu_server_of_handle(uint64_t handle);
int rgpu_server_of_ctx(uint64_t ctx);
int rgpu_server_of_ptr(uint64_t ptr);
int rgpu_device_server(int dev, int *local); /* and the device's ordinal on that server */
void rgpu_set_server_devices(int server, int count); /* in server order, once each (driver.c) */
int rgpu_route_push(int server);                      /* returns what rgpu_route_pop restores */
void rgpu_route_pop(int prev);
int rgpu_ranges_ctx(uint64_t ptr, uint64_t *ctx); /* memory.c: the context of a device address; -1 unknown */
/* memory.c: a device-to-device copy, through this host when the two ranges are on different servers. */
CUresult rgpu_copy_device(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async);

/* Thread-local current context (rgpu handle); the connection tells the server lazily. */
uint64_t rgpu_thread_ctx(void);
void rgpu_set_thread_ctx(uint64_t ctx);
void rgpu_forget_server_ctx(uint64_t ctx);
void rgpu_note_server_ctx(uint64_t ctx);

uint64_t rgpu_stream_handle(CUstream s);
/* A module image file (driver.c): its bytes and a NUL after them (PTX need not end in one); *data is NULL, and
 * the result an error, when it cannot be read. The caller frees *data. */
CUresult rgpu_read_image_file(const char *path, uint8_t **data, size_t *len);
/* memory.c: whether ptr lies in this process's page-locked host memory (not device memory the server gave);
 * rgpu_host_range: that allocation's start and size (0), or -1. */
int rgpu_is_program_host(uint64_t ptr);
int rgpu_host_range(uint64_t ptr, uint64_t *start, uint64_t *size);
/* shadow.c: page-locked memory a kernel is given lives in a device shadow until the next synchronization.
 * rgpu_shadow_param: moves *ptr into its allocation's shadow (uploaded on `stream` first), 0; -1: no shadow.
 * rgpu_shadows_pull: the shadows back into the program's memory (after a synchronization that waited).
 * rgpu_shadow_settle: before rgpu touches [ptr, ptr+n) itself. rgpu_shadow_forget: the allocation is gone. */
int rgpu_shadow_param(uint64_t *ptr, CUstream stream);
int rgpu_shadows_held(void);
void rgpu_shadows_pull(void);
void rgpu_shadow_settle(uint64_t ptr, uint64_t n);
void rgpu_shadow_forget(uint64_t host);
uint64_t rgpu_function_handle(CUfunction f); /* the server's handle of a function (launch.c); 0 for NULL */
/* graph.c: a host<->device copy on stream s, or a capture-unsafe call (allocation, synchronous copy), during
 * stream capture: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (and the capture is invalidated), else CUDA_SUCCESS. */
CUresult rgpu_capture_host_copy(CUstream s);
/* graph.c: a call CUDA does not capture, on a capturing stream: the capture is invalidated and the call gets
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (CUDA_SUCCESS: the stream is not capturing) */
CUresult rgpu_capture_refuse(CUstream s, const char *what);
/* graph_host.c: cuLaunchHostFunc on a capturing stream becomes a host node (*was_captured 1 then) */
CUresult rgpu_capture_host_func(CUstream s, CUhostFn fn, void *data, int *was_captured);
CUresult rgpu_capture_unsafe_call(void);
int rgpu_capture_active(void); /* whether any stream of this process is capturing */
CUresult rgpu_unsupported(int *logged, const char *name);
/* CUDA_ERROR_NOT_SUPPORTED, logged once, where the server's protocol is older than 1.`minor`; else CUDA_SUCCESS. */
CUresult rgpu_need_protocol(uint16_t minor, int *logged, const char *what);
/* driver.c: module images (a fatbin or an ELF cubin is binary, anything else PTX text) */
int rgpu_image_is_binary(const void *image);
CUresult rgpu_module_load_image(CUmodule *mod, const void *image, size_t size);
/* jit_link.c: JIT options checked, and what they ask to hear cleared (empty logs, no time), for a load whose image
 * the server's driver JITs with its defaults */
CUresult rgpu_jit_options_unused(unsigned n, CUjit_option *options, void **values);
/* arrays.c: a 2D or 3D copy with a CUDA array at one end or both */
/* Managed memory (managed.c): around each request, settled before it (its bulk and reply buffers current here and
 * pinned until leave); the managed allocation holding ptr (-1: none); whether [p, p+n) is managed memory to copy
 * on the device; cuMemFree of it (1: it was managed, *r the result); a prefetch to a device ordinal (-1: the host,
 * -2: no device); what devices offer of it. */
void rgpu_managed_enter(const void *bulk, size_t bulk_len, const struct rgpu_sink *sinks, size_t nsinks);
void rgpu_managed_leave(void);
int rgpu_managed_range(uint64_t ptr, uint64_t *start, uint64_t *size);
int rgpu_managed_device_side(uint64_t p, uint64_t n);
int rgpu_managed_free(CUdeviceptr p, CUresult *r);
void rgpu_managed_drop_ctx(uint64_t ctx); /* its regions' views unmapped: the server destroyed it */
CUresult rgpu_managed_prefetch(CUdeviceptr p, size_t n, int device, CUstream s);
void rgpu_managed_offered(int32_t *attrs);
CUresult rgpu_array_copy(const CUDA_MEMCPY3D *p, CUstream stream, int async);

struct rgpu_error_name {
    int code;
    const char *name;
};
extern const struct rgpu_error_name rgpu_error_names[];

#endif
