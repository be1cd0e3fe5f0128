/* Library handles on the server for the math-library stand-ins, and their statuses for a failed call. */
#include "remote.h"
#include "rgpu_ops.h"

/* Every library's create and destroy operations share one shape: a handle in the reply, a handle in the
 * request (BLAS_CREATE/DNN_CREATE, BLAS_DESTROY/DNN_DESTROY). */
_Static_assert(RGPU_BLAS_CREATE_REP_SIZE == RGPU_DNN_CREATE_REP_SIZE &&
                   RGPU_BLAS_DESTROY_REQ_SIZE == RGPU_DNN_DESTROY_REQ_SIZE && RGPU_BLAS_CREATE_REQ_SIZE == 0 &&
                   RGPU_DNN_CREATE_REQ_SIZE == 0,
               "library handles travel alike");

int rgpu_standin_open(uint16_t create_op, uint64_t *server)
{
    if (cudaFree(NULL) != 0) /* no device or no server: NVIDIA's libraries report it as not initialized */
        return RGPU_STANDIN_NO_DEVICE;
    uint8_t rep[RGPU_BLAS_CREATE_REP_SIZE];
    struct rgpu_blas_create_rep got;
    int r = rgpu_ext_call(create_op, NULL, 0, NULL, 0, rep, sizeof rep, NULL, 0, NULL);
    if (!r && rgpu_unpack_blas_create(rep, sizeof rep, &got) == 0)
        *server = got.handle;
    return r;
}

int rgpu_standin_close(uint16_t destroy_op, uint64_t server)
{
    uint8_t a[RGPU_BLAS_DESTROY_REQ_SIZE];
    rgpu_pack_blas_destroy(a, &(struct rgpu_blas_destroy_req){.handle = server});
    return rgpu_ext_call(destroy_op, a, sizeof a, NULL, 0, NULL, 0, NULL, 0, NULL);
}

int rgpu_library_status(int r, const struct rgpu_library_statuses *codes)
{
    switch (r) {
    case 0:
        return codes->success;
    case 1:   /* CUDA_ERROR_INVALID_VALUE */
    case 400: /* CUDA_ERROR_INVALID_HANDLE: a handle or stream of another session */
        return codes->invalid_value;
    case 2: /* CUDA_ERROR_OUT_OF_MEMORY */
        return codes->alloc_failed;
    case 3:   /* CUDA_ERROR_NOT_INITIALIZED */
    case 100: /* CUDA_ERROR_NO_DEVICE */
        return codes->not_initialized;
    case 801: /* CUDA_ERROR_NOT_SUPPORTED */
        return codes->not_supported;
    default:
        return codes->failed;
    }
}
