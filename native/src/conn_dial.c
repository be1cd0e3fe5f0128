/* Dialing rgpu-server: host:port or [v6]:port, each address in turn, a 10 s connect timeout, TCP_NODELAY. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn.h"

int conn_dial(const char *spec)
{
    char host[256] = "127.0.0.1", port[16] = "9713";
    if (spec && *spec) {
        const char *colon;
        if (spec[0] == '[') {
            const char *end = strchr(spec, ']');
            if (!end || (size_t)(end - spec - 1) >= sizeof host)
                return -1;
            memcpy(host, spec + 1, (size_t)(end - spec - 1));
            host[end - spec - 1] = 0;
            colon = end[1] == ':' ? end + 1 : NULL;
        } else {
            colon = strrchr(spec, ':');
            size_t hl = colon ? (size_t)(colon - spec) : strlen(spec);
            if (hl >= sizeof host)
                return -1;
            memcpy(host, spec, hl);
            host[hl] = 0;
        }
        if (colon)
            snprintf(port, sizeof port, "%s", colon + 1);
    }
    struct addrinfo hints = {0}, *res, *ai;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, port, &hints, &res)) {
        errno = 0; /* not a system error: the caller says the address is bad */
        return -1;
    }
    int fd = -1;
    for (ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc && errno == EINPROGRESS) {
            struct pollfd p = {fd, POLLOUT, 0};
            int err = 0;
            socklen_t el = sizeof err;
            rc = poll(&p, 1, 10000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0 ? 0 : -1;
            if (err)
                errno = err;
            else if (rc)
                errno = ETIMEDOUT;
        }
        if (rc) {
            close(fd);
            fd = -1;
            continue;
        }
        fcntl(fd, F_SETFL, fl);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    freeaddrinfo(res);
    return fd;
}
