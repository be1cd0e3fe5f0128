/* Legacy activation descriptors (cudnnActivationDescriptor_t): plain local values, read by the fused batch-norm
 * calls, which carry mode, NaN propagation and coefficient on the wire. */
#include <stdlib.h>

#include "dnn.h"

DNN_API int cudnnCreateActivationDescriptor(struct dnn_activation **out)
{
    if (!out)
        return CUDNN_STATUS_BAD_PARAM;
    *out = calloc(1, sizeof **out);
    if (!*out)
        return CUDNN_STATUS_ALLOC_FAILED;
    (*out)->swish_beta = 1.0; /* cuDNN's default beta for swish */
    return CUDNN_STATUS_SUCCESS;
}

DNN_API int cudnnDestroyActivationDescriptor(struct dnn_activation *a)
{
    free(a);
    return CUDNN_STATUS_SUCCESS;
}

DNN_API int cudnnSetActivationDescriptor(struct dnn_activation *a, int mode, int nan, double coef)
{
    if (!a || mode < CUDNN_ACTIVATION_SIGMOID || mode > CUDNN_ACTIVATION_SWISH ||
        (nan != CUDNN_NOT_PROPAGATE_NAN && nan != CUDNN_PROPAGATE_NAN))
        return CUDNN_STATUS_BAD_PARAM;
    a->mode = mode, a->nan = nan, a->coef = coef;
    return CUDNN_STATUS_SUCCESS;
}

DNN_API int cudnnGetActivationDescriptor(const struct dnn_activation *a, int *mode, int *nan, double *coef)
{
    if (!a || !mode || !nan || !coef)
        return CUDNN_STATUS_BAD_PARAM;
    *mode = a->mode, *nan = a->nan, *coef = a->coef;
    return CUDNN_STATUS_SUCCESS;
}

DNN_API int cudnnSetActivationDescriptorSwishBeta(struct dnn_activation *a, double beta)
{
    if (!a)
        return CUDNN_STATUS_BAD_PARAM;
    a->swish_beta = beta;
    return CUDNN_STATUS_SUCCESS;
}

DNN_API int cudnnGetActivationDescriptorSwishBeta(const struct dnn_activation *a, double *beta)
{
    if (!a || !beta)
        return CUDNN_STATUS_BAD_PARAM;
    *beta = a->swish_beta;
    return CUDNN_STATUS_SUCCESS;
}
