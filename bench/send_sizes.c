/* What one send's size costs over loopback TCP: a client sends COPY_BYTES (1 MiB) in sends of each size given (in
 * KiB), a server thread receives it whole (recv up to all that is left) and answers one byte -- the shape of a
 * synchronous copy up, as bench/raw_tcp.c's 'U' -- best and mean of REPS. Both ends block in recv (no polling).
 *   cc -O2 -o /tmp/send_sizes bench/send_sizes.c -lpthread && /tmp/send_sizes 1024 256 64 16
 * Why: a sealed copy's stand-in sent a 1 MiB record in 64 KiB pieces (one per AEAD pipe piece) and spent 236 of
 * its 245 us in those sends (bench/results/gpu-2026-12-04h-records, run 2). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define COPY_BYTES (1u << 20)
#define REPS 2000

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void *serve(void *arg)
{
    int fd = *(int *)arg;
    uint8_t *buf = malloc(COPY_BYTES);
    for (; buf;) {
        for (size_t left = COPY_BYTES; left;) {
            ssize_t r = recv(fd, buf, left, 0);
            if (r <= 0)
                goto out;
            left -= (size_t)r;
        }
        if (send(fd, "k", 1, MSG_NOSIGNAL) != 1)
            break;
    }
out:
    free(buf);
    return NULL;
}

static int send_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s SEND_KIB...\n", argv[0]);
        return 2;
    }
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof addr;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof addr) || listen(lfd, 1) ||
        getsockname(lfd, (struct sockaddr *)&addr, &alen)) {
        perror("listen");
        return 1;
    }
    int cfd = socket(AF_INET, SOCK_STREAM, 0);
    if (cfd < 0 || connect(cfd, (struct sockaddr *)&addr, sizeof addr)) {
        perror("connect");
        return 1;
    }
    int sfd = accept(lfd, NULL, NULL);
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(sfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    pthread_t server;
    pthread_create(&server, NULL, serve, &sfd);
    uint8_t *data = malloc(COPY_BYTES);
    memset(data, 3, COPY_BYTES);
    for (int a = 1; a < argc; a++) {
        size_t piece = strtoul(argv[a], NULL, 10) << 10;
        if (!piece || piece > COPY_BYTES) {
            fprintf(stderr, "send size %s KiB: 1 to %u\n", argv[a], COPY_BYTES >> 10);
            return 2;
        }
        double best = 1e30, sum = 0;
        for (int i = 0; i < REPS; i++) {
            uint64_t t0 = now_ns();
            for (size_t off = 0; off < COPY_BYTES; off += piece)
                if (send_all(cfd, data + off, COPY_BYTES - off < piece ? COPY_BYTES - off : piece))
                    return 1;
            char k;
            if (recv(cfd, &k, 1, MSG_WAITALL) != 1)
                return 1;
            double us = (now_ns() - t0) / 1e3;
            best = us < best ? us : best;
            sum += us;
        }
        printf("1 MiB in %4zu KiB sends: best %6.1f us (%5.2f GB/s), mean %6.1f us\n", piece >> 10, best,
               COPY_BYTES / best / 1e3, sum / REPS);
    }
    shutdown(cfd, SHUT_RDWR);
    pthread_join(server, NULL);
    return 0;
}
