/* Writing iovecs whole: the C stand-ins' requests (conn_io.c) and the worker's C request loop's replies
 * (lane/serve_io.c). */
#ifndef RGPU_SEND_IOV_H
#define RGPU_SEND_IOV_H

#include <sys/uio.h>

/* v[0, n), whole (v is consumed; empty entries are skipped). 0, or -1 with errno. MSG_NOSIGNAL: a peer gone away
 * is EPIPE, not a SIGPIPE that kills the process. */
int rgpu_send_iov(int fd, struct iovec *v, int n);

#endif
