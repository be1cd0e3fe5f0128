/* Executions: each exec function is one deferred FFT_EXEC naming the server's plan, the stream, the operands
 * and the work area; the server checks them against the plan it made, so what is checked here is only what
 * cuFFT answers at once (an unknown or unmade plan, an exec function of another type, a bad direction). */
#include "fft.h"

static int is_real(int data_type)
{
    return data_type == 0 || data_type == 1 || data_type == 2 || data_type == 14; /* CUDA_R_{32F,64F,16F,16BF} */
}

/* `kind`: the cufftType the exec function implies, 0 for cufftXtExec (any plan). */
static int execute(int handle, int kind, void *input, void *output, int direction)
{
    struct fft_plan *p = rgpu_fft_plan(handle);
    if (!p || !p->made)
        return CUFFT_INVALID_PLAN;
    /* An exec function of another type than the plan's (cufftExecR2C on a C2C plan) is accepted, as NVIDIA's
     * cuFFT accepts it (measured on the H200): the plan's own transform runs, over the plan's extents. */
    if (!input || !output)
        return CUFFT_INVALID_VALUE;
    if (!is_real(p->desc.input_type) && !is_real(p->desc.output_type) && direction != RGPU_FFT_FORWARD &&
        direction != RGPU_FFT_INVERSE)
        return CUFFT_INVALID_VALUE;
    void *work = p->work ? p->work : p->owned_work;
    if (p->work_size && !work)
        return CUFFT_NO_WORKSPACE;
    uint8_t args[RGPU_FFT_EXEC_REQ_SIZE];
    rgpu_pack_fft_exec(args, &(struct rgpu_fft_exec_req){
        .plan = p->server, .stream = rgpu_ext_stream(p->stream), .input = (uintptr_t)input,
        .output = (uintptr_t)output, .work = (uintptr_t)work, .direction = direction, .kind = (uint32_t)kind});
    return rgpu_fft_status(rgpu_ext_defer(RGPU_OP_FFT_EXEC, args, sizeof args, NULL, 0));
}

FFT_API int cufftExecC2C(int plan, void *input, void *output, int direction)
{
    return execute(plan, CUFFT_C2C, input, output, direction);
}

FFT_API int cufftExecZ2Z(int plan, void *input, void *output, int direction)
{
    return execute(plan, CUFFT_Z2Z, input, output, direction);
}

FFT_API int cufftExecR2C(int plan, void *input, void *output)
{
    return execute(plan, CUFFT_R2C, input, output, RGPU_FFT_FORWARD);
}

FFT_API int cufftExecD2Z(int plan, void *input, void *output)
{
    return execute(plan, CUFFT_D2Z, input, output, RGPU_FFT_FORWARD);
}

FFT_API int cufftExecC2R(int plan, void *input, void *output)
{
    return execute(plan, CUFFT_C2R, input, output, RGPU_FFT_INVERSE);
}

FFT_API int cufftExecZ2D(int plan, void *input, void *output)
{
    return execute(plan, CUFFT_Z2D, input, output, RGPU_FFT_INVERSE);
}

FFT_API int cufftXtExec(int plan, void *input, void *output, int direction)
{
    return execute(plan, 0, input, output, direction);
}
