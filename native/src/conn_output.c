/* Kernel output (OUTPUT frames, with the OUTPUT feature): what the session's kernels printed on the server,
 * written to this program's stdout where a local driver would have printed it -- before the call whose reply
 * follows it returns, through the program's own stdout stream, so it keeps its place among the program's own
 * printf output. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "conn.h"

/* The frame's bulk is the rest of the record being received: read whole and, with a PSK, authenticated before
 * any of it is written. Returns 0, or -1 with errno set for a frame the server had no business sending. */
int conn_write_output(const rgpu_header *h, size_t args_len)
{
    if (!(rgpu_conn.features & RGPU_FEATURE_OUTPUT) || args_len || h->status || h->request_id ||
        !(h->flags & RGPU_FLAG_REPLY)) {
        int asked = (rgpu_conn.features & RGPU_FEATURE_OUTPUT) != 0;
        rgpu_log(RGPU_LOG_ERROR, "rgpu-server sent kernel output %s; closing the connection",
                 asked ? "in a malformed frame" : "that this library did not ask for");
        errno = EPROTO;
        return -1;
    }
    uint8_t *text = malloc(h->bulk_len ? h->bulk_len : 1);
    if (!text || conn_finish_record(text, h->bulk_len)) {
        free(text);
        return -1;
    }
    fwrite(text, 1, h->bulk_len, stdout);
    free(text);
    return 0;
}
