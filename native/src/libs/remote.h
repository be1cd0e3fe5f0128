/* Shared by the math-library stand-ins (libcublas, libcublasLt, libcudnn): the driver shim's private interface
 * they reach the server through, and the library handles they keep there. Not for libcudart, which must also
 * run on NVIDIA's driver. */
#ifndef RGPU_REMOTE_H
#define RGPU_REMOTE_H

#include <stddef.h>
#include <stdint.h>

/* libcuda.so.1 (rgpu's driver shim): its private interface, the one connection. Results are CUresults. */
int rgpu_ext_call(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len, void *reply,
                  size_t reply_len, void *out, size_t out_cap, size_t *out_len);
int rgpu_ext_defer(uint16_t op, const void *args, size_t args_len, const void *bulk, size_t bulk_len);
uint64_t rgpu_ext_stream(void *stream);
int rgpu_ext_is_device(uint64_t ptr); /* in memory the server gave, not this process's own */
/* A reply inconsistent with the request: logged, the connection closed; returns the CUresult calls now get. */
int rgpu_ext_bad_reply(uint16_t op, const char *what);
int cudaFree(void *); /* rgpu's libcudart: makes the thread's device context current, as NVIDIA's libraries do */

/* A library handle on the server, in the thread's device context: 0, RGPU_STANDIN_NO_DEVICE, or a CUresult. */
#define RGPU_STANDIN_NO_DEVICE (-1)
int rgpu_standin_open(uint16_t create_op, uint64_t *server);
int rgpu_standin_close(uint16_t destroy_op, uint64_t server);

/* A library's own status codes for what a CUresult from the connection or the server can mean. */
struct rgpu_library_statuses {
    int success, invalid_value, alloc_failed, not_initialized, not_supported, failed;
};
int rgpu_library_status(int cuda_result, const struct rgpu_library_statuses *codes);

#endif
