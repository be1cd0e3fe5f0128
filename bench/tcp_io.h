/* Blocking socket I/O for the C floors beside rgpu's benchmarks (raw_tcp.c, tcp_streams.c): whole sends and
 * receives, a receive polling `spin_ns` before it sleeps, as rgpu's ends do (RGPU_SPIN_US / --spin-us). Each
 * program is one file built alone: the functions are static here. */
#ifndef RGPU_BENCH_TCP_IO_H
#define RGPU_BENCH_TCP_IO_H

#include <errno.h>
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

#endif
