/* Texture and surface objects (protocol 1.8): cuTexObjectCreate, cuSurfObjectCreate, their destruction and their
 * Get*Desc queries. The descriptions go to the server's driver as the driver's structures (an array in them is the
 * server's handle already: CUarray values are those); the object is the driver's own number, which kernels take.
 * What was asked for stays here, and the queries answer from it. */
#include <string.h>

#include "keyed.h"
#include "rgpu_shim.h"

#define API __attribute__((visibility("default")))

_Static_assert(sizeof(CUDA_RESOURCE_DESC) == RGPU_RESOURCE_DESC_SIZE, "a resource description travels as it is");
_Static_assert(sizeof(CUDA_TEXTURE_DESC) == RGPU_TEXTURE_DESC_SIZE, "a texture description travels as it is");
_Static_assert(sizeof(CUDA_RESOURCE_VIEW_DESC) == RGPU_RESOURCE_VIEW_DESC_SIZE, "a view travels as it is");

struct described {
    CUDA_RESOURCE_DESC res;
    CUDA_TEXTURE_DESC tex;
    CUDA_RESOURCE_VIEW_DESC view;
};

static struct rgpu_keyed textures = RGPU_KEYED_INIT, surfaces = RGPU_KEYED_INIT;
RGPU_FORK_RESET(textures_lock, &textures.lock)
RGPU_FORK_RESET(surfaces_lock, &surfaces.lock)

/* Object numbers are each server's driver's own (1, 2, ...): with several servers, one number may name an object
 * of each. What is kept here is keyed by the number and the server that made it. */
static uint64_t key(int server, unsigned long long object) { return (uint64_t)server << 56 ^ object; }

static int current_server(void)
{
    int server = rgpu_server_of_ctx(rgpu_thread_ctx());
    return server < 0 ? 0 : server;
}

/* The server of a kept object, the current context's first; -1 when none has it. */
static int server_of(struct rgpu_keyed *kept, unsigned long long object)
{
    int current = current_server(), count = rgpu_server_count();
    if (rgpu_keyed_get(kept, key(current, object), NULL, 0) == 0)
        return current;
    for (int server = 0; server < count; server++)
        if (rgpu_keyed_get(kept, key(server, object), NULL, 0) == 0)
            return server;
    return -1;
}

static CUresult need_objects(void)
{
    static int logged;
    CUresult r = rgpu_ready();
    return r == CUDA_SUCCESS ? rgpu_need_protocol(8, &logged, "texture and surface objects") : r;
}

static CUresult create(uint16_t op, const void *args, size_t args_len, const struct described *d, size_t size,
                       struct rgpu_keyed *kept, unsigned long long *out)
{
    uint8_t rep[RGPU_TEX_OBJECT_CREATE_REP_SIZE];
    struct rgpu_tex_object_create_rep got;
    _Static_assert(RGPU_TEX_OBJECT_CREATE_REP_SIZE == RGPU_SURF_OBJECT_CREATE_REP_SIZE, "one reply for two");
    _Static_assert(offsetof(struct described, tex) == RGPU_RESOURCE_DESC_SIZE &&
                       offsetof(struct described, view) == RGPU_RESOURCE_DESC_SIZE + RGPU_TEXTURE_DESC_SIZE,
                   "the descriptions lie as they travel");
    CUresult r = need_objects();
    if (r == CUDA_SUCCESS)
        r = rgpu_call(op, args, args_len, d, size, rep, sizeof rep, NULL);
    if (r == CUDA_SUCCESS && (rgpu_unpack_tex_object_create(rep, sizeof rep, &got) != 0 || !got.object))
        return rgpu_bad_reply(op, "no object number");
    if (r == CUDA_SUCCESS && rgpu_keyed_put(kept, key(current_server(), got.object), d, sizeof *d) != 0) {
        uint8_t gone[RGPU_TEX_OBJECT_DESTROY_REQ_SIZE];
        rgpu_pack_tex_object_destroy(gone, &(struct rgpu_tex_object_destroy_req){got.object});
        rgpu_call(op == RGPU_OP_TEX_OBJECT_CREATE ? RGPU_OP_TEX_OBJECT_DESTROY : RGPU_OP_SURF_OBJECT_DESTROY, gone,
                  sizeof gone, NULL, 0, NULL, 0, NULL);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (r == CUDA_SUCCESS)
        *out = got.object;
    return r;
}

API CUresult cuTexObjectCreate(CUtexObject *out, const CUDA_RESOURCE_DESC *res, const CUDA_TEXTURE_DESC *tex,
                               const CUDA_RESOURCE_VIEW_DESC *view)
{
    struct described d = {0};
    if (!out || !res || !tex)
        return CUDA_ERROR_INVALID_VALUE;
    d.res = *res, d.tex = *tex;
    if (view)
        d.view = *view;
    uint8_t a[RGPU_TEX_OBJECT_CREATE_REQ_SIZE];
    rgpu_pack_tex_object_create(a, &(struct rgpu_tex_object_create_req){view != NULL});
    return create(RGPU_OP_TEX_OBJECT_CREATE, a, sizeof a, &d,
                  RGPU_RESOURCE_DESC_SIZE + RGPU_TEXTURE_DESC_SIZE + (view ? RGPU_RESOURCE_VIEW_DESC_SIZE : 0),
                  &textures, out);
}

API CUresult cuSurfObjectCreate(CUsurfObject *out, const CUDA_RESOURCE_DESC *res)
{
    struct described d = {0};
    if (!out || !res)
        return CUDA_ERROR_INVALID_VALUE;
    d.res = *res;
    return create(RGPU_OP_SURF_OBJECT_CREATE, NULL, 0, &d, RGPU_RESOURCE_DESC_SIZE, &surfaces, out);
}

static CUresult destroy(uint16_t op, struct rgpu_keyed *kept, unsigned long long object)
{
    int server = server_of(kept, object);
    if (server < 0 || rgpu_keyed_take(kept, key(server, object), NULL, 0) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    _Static_assert(RGPU_TEX_OBJECT_DESTROY_REQ_SIZE == RGPU_SURF_OBJECT_DESTROY_REQ_SIZE, "one request for two");
    uint8_t a[RGPU_TEX_OBJECT_DESTROY_REQ_SIZE];
    rgpu_pack_tex_object_destroy(a, &(struct rgpu_tex_object_destroy_req){object});
    int prev = rgpu_route_push(server); /* (to the server that made it, whatever context is current) */
    CUresult r = rgpu_call(op, a, sizeof a, NULL, 0, NULL, 0, NULL);
    rgpu_route_pop(prev);
    return r;
}

API CUresult cuTexObjectDestroy(CUtexObject t) { return destroy(RGPU_OP_TEX_OBJECT_DESTROY, &textures, t); }
API CUresult cuSurfObjectDestroy(CUsurfObject s) { return destroy(RGPU_OP_SURF_OBJECT_DESTROY, &surfaces, s); }

static CUresult described(struct rgpu_keyed *kept, unsigned long long object, void *out, size_t at, size_t size)
{
    struct described d;
    int server = server_of(kept, object);
    if (!out || server < 0 || rgpu_keyed_get(kept, key(server, object), &d, sizeof d) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(out, (const uint8_t *)&d + at, size);
    return CUDA_SUCCESS;
}

API CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *out, CUtexObject t)
{
    return described(&textures, t, out, offsetof(struct described, res), sizeof *out);
}
API CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *out, CUtexObject t)
{
    return described(&textures, t, out, offsetof(struct described, tex), sizeof *out);
}
API CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *out, CUtexObject t)
{
    return described(&textures, t, out, offsetof(struct described, view), sizeof *out);
}
API CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *out, CUsurfObject s)
{
    return described(&surfaces, s, out, offsetof(struct described, res), sizeof *out);
}
