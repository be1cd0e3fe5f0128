#include "send_iov.h"

#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>

int rgpu_send_iov(int fd, struct iovec *v, int n)
{
    while (n && !v->iov_len)
        v++, n--;
    while (n) {
        struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)(n > 64 ? 64 : n)};
        ssize_t k = sendmsg(fd, &m, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        for (size_t done = (size_t)k; n && (done || !v->iov_len);) {
            size_t take = done < v->iov_len ? done : v->iov_len;
            v->iov_base = (uint8_t *)v->iov_base + take, v->iov_len -= take, done -= take;
            if (!v->iov_len)
                v++, n--;
        }
    }
    return 0;
}

int rgpu_recv_all(int fd, void *p, size_t n)
{
    uint8_t *at = p;
    while (n) {
        ssize_t got = recv(fd, at, n, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            if (got == 0)
                errno = ECONNRESET;
            return -1;
        }
        at += got, n -= (size_t)got;
    }
    return 0;
}
