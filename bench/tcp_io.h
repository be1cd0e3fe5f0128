/* Blocking socket I/O for the C floors beside rgpu's benchmarks (raw_tcp.c, tcp_streams.c): a listener on
 * 127.0.0.1 only and connections to it, whole sends and receives, a receive polling `spin_ns` before it sleeps, as
 * rgpu's ends do (RGPU_SPIN_US / --spin-us). Each program is one file built alone: the functions are static here. */
#ifndef RGPU_BENCH_TCP_IO_H
#define RGPU_BENCH_TCP_IO_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

static uint64_t spin_ns;

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static ssize_t recv_some(int fd, void *b, size_t n)
{
    if (spin_ns) {
        uint64_t deadline = now_ns() + spin_ns;
        do {
            ssize_t r = recv(fd, b, n, MSG_DONTWAIT);
            if (r >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
                return r;
        } while (now_ns() < deadline);
    }
    return recv(fd, b, n, 0);
}

static int recv_all(int fd, void *p, size_t n)
{
    uint8_t *b = p;
    while (n) {
        ssize_t r = recv_some(fd, b, n);
        if (r <= 0) {
            if (r < 0 && errno == EINTR)
                continue;
            return -1;
        }
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

static int send_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A listening socket on 127.0.0.1 (never another address), its port in *addr; -1 on failure (errno says why). */
static int listen_loopback(struct sockaddr_in *addr, int backlog)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t len = sizeof *addr;
    *addr = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || bind(fd, (struct sockaddr *)addr, sizeof *addr) || listen(fd, backlog) ||
        getsockname(fd, (struct sockaddr *)addr, &len))
        return -1;
    return fd;
}

/* One connection to the listener `lfd` at `addr`: its client end and its accepted server end, both TCP_NODELAY as
 * rgpu's are. -1 on failure. */
static int connect_pair(int lfd, const struct sockaddr_in *addr, int *client, int *server)
{
    int one = 1;
    *client = socket(AF_INET, SOCK_STREAM, 0);
    if (*client < 0 || connect(*client, (const struct sockaddr *)addr, sizeof *addr))
        return -1;
    *server = accept(lfd, NULL, NULL);
    if (*server < 0)
        return -1;
    setsockopt(*client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(*server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return 0;
}

#endif
