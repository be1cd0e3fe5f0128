/* Library handles on the server for the math-library stand-ins. */
#include "remote.h"
#include "rgpu_wire.h"

int rgpu_standin_open(uint16_t create_op, uint64_t *server)
{
    if (cudaFree(NULL) != 0) /* no device or no server: NVIDIA's libraries report it as not initialized */
        return RGPU_STANDIN_NO_DEVICE;
    uint8_t rep[8];
    int r = rgpu_ext_call(create_op, NULL, 0, NULL, 0, rep, 8, NULL, 0, NULL);
    if (!r)
        *server = rgpu_get_u64(rep);
    return r;
}

int rgpu_standin_close(uint16_t destroy_op, uint64_t server)
{
    uint8_t a[8];
    rgpu_put_u64(a, server);
    return rgpu_ext_call(destroy_op, a, 8, NULL, 0, NULL, 0, NULL, 0, NULL);
}
