/* Socket I/O whole: writing iovecs (the C stand-ins' requests, conn_io.c, and copy links' parts, conn_links.c; the
 * worker's C request loop's replies, lane/serve_io.c) and reading an exact count of bytes on a blocking socket (a
 * copy link's join answer, conn_links.c; the worker's link threads, lane/links.c). */
#ifndef RGPU_SEND_IOV_H
#define RGPU_SEND_IOV_H

#include <sys/uio.h>

/* v[0, n), whole (v is consumed; empty entries are skipped). 0, or -1 with errno. MSG_NOSIGNAL: a peer gone away
 * is EPIPE, not a SIGPIPE that kills the process. */
int rgpu_send_iov(int fd, struct iovec *v, int n);
/* Exactly n bytes into p (EINTR retried), or -1 with errno: the end of the connection reads as ECONNRESET. */
int rgpu_recv_all(int fd, void *p, size_t n);

#endif
