/* Kernel output (OUTPUT frames, with the OUTPUT feature): what the session's kernels printed on the server,
 * written to this program's stdout where a local driver would have printed it -- before the call whose reply
 * follows it returns, through the program's own stdout stream, so it keeps its place among the program's own
 * printf output. */
#include <errno.h>
#include <stdio.h>

#include "conn.h"

/* The frame's bulk follows on the socket when `bulk` is NULL (plain), else it is in memory (opened record).
 * Returns 0, or -1 with errno set for a frame the server had no business sending. */
int conn_write_output(const rgpu_header *h, size_t args_len, const uint8_t *bulk)
{
    if (!(rgpu_conn.features & RGPU_FEATURE_OUTPUT) || args_len || h->status || h->request_id ||
        !(h->flags & RGPU_FLAG_REPLY)) {
        int asked = (rgpu_conn.features & RGPU_FEATURE_OUTPUT) != 0;
        rgpu_log(RGPU_LOG_ERROR, "rgpu-server sent kernel output %s; closing the connection",
                 asked ? "in a malformed frame" : "that this library did not ask for");
        errno = EPROTO;
        return -1;
    }
    if (bulk) {
        fwrite(bulk, 1, h->bulk_len, stdout);
        return 0;
    }
    uint8_t buf[4096];
    for (size_t rest = h->bulk_len; rest;) {
        size_t k = rest < sizeof buf ? rest : sizeof buf;
        if (conn_read_all(buf, k))
            return -1;
        fwrite(buf, 1, k, stdout);
        rest -= k;
    }
    return 0;
}
