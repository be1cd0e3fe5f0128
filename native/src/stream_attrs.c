/* Stream attributes (cuStreamSetAttribute, GetAttribute, CopyAttributes): the 64-byte value travels as it is, as
 * launch attributes' do, and the server's driver decides what it means (protocol 1.7). Each is a round trip, so that
 * a value the driver refuses is refused at the call, as natively; programs set them once per stream. */
#include <string.h>

#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))

_Static_assert(sizeof(CUstreamAttrValue) == RGPU_STREAM_ATTRIBUTE_VALUE_SIZE, "a stream attribute value travels as it is");

static CUresult supported(void)
{
    static int logged;
    return rgpu_need_protocol(7, &logged, "stream attributes");
}

API CUresult cuStreamSetAttribute(CUstream s, CUstreamAttrID id, const CUstreamAttrValue *value)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = supported();
    if (r != CUDA_SUCCESS)
        return r;
    uint8_t a[RGPU_STREAM_SET_ATTRIBUTE_REQ_SIZE];
    rgpu_pack_stream_set_attribute(a, &(struct rgpu_stream_set_attribute_req){rgpu_stream_handle(s), (uint32_t)id});
    return rgpu_call(RGPU_OP_STREAM_SET_ATTRIBUTE, a, sizeof a, value, sizeof *value, NULL, 0, NULL);
}

API CUresult cuStreamGetAttribute(CUstream s, CUstreamAttrID id, CUstreamAttrValue *value)
{
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = supported();
    if (r != CUDA_SUCCESS)
        return r;
    CUstreamAttrValue got;
    struct rgpu_sink sink = {(uint8_t *)&got, sizeof got, 0};
    uint8_t a[RGPU_STREAM_GET_ATTRIBUTE_REQ_SIZE];
    rgpu_pack_stream_get_attribute(a, &(struct rgpu_stream_get_attribute_req){rgpu_stream_handle(s), (uint32_t)id});
    r = rgpu_call(RGPU_OP_STREAM_GET_ATTRIBUTE, a, sizeof a, NULL, 0, NULL, 0, &sink);
    if (r == CUDA_SUCCESS && sink.len != sizeof got)
        return rgpu_bad_reply(RGPU_OP_STREAM_GET_ATTRIBUTE, "not one attribute value");
    if (r == CUDA_SUCCESS)
        memcpy(value, &got, sizeof got); /* (nothing of a short or failed reply reaches the program) */
    return r;
}

API CUresult cuStreamCopyAttributes(CUstream dst, CUstream src)
{
    CUresult r = supported();
    if (r != CUDA_SUCCESS)
        return r;
    uint8_t a[RGPU_STREAM_COPY_ATTRIBUTES_REQ_SIZE];
    rgpu_pack_stream_copy_attributes(a, &(struct rgpu_stream_copy_attributes_req){rgpu_stream_handle(dst),
                                                                                  rgpu_stream_handle(src)});
    return rgpu_call(RGPU_OP_STREAM_COPY_ATTRIBUTES, a, sizeof a, NULL, 0, NULL, 0, NULL);
}

API CUresult cuStreamSetAttribute_ptsz(CUstream s, CUstreamAttrID id, const CUstreamAttrValue *value)
{
    return cuStreamSetAttribute(s, id, value);
}
API CUresult cuStreamGetAttribute_ptsz(CUstream s, CUstreamAttrID id, CUstreamAttrValue *value)
{
    return cuStreamGetAttribute(s, id, value);
}
API CUresult cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src) { return cuStreamCopyAttributes(dst, src); }
