/* The C floor for rgpu's loopback numbers: what plain TCP on this host does with no protocol, no Python and no
 * GPU. One process, a server thread and the measuring client, over 127.0.0.1 only.
 *
 *   raw_tcp ECHO_COUNT SPIN_US SIZE...     (sizes in bytes)
 *
 * prints one JSON line: 24-byte echo round trip p50/p99 (a NOP frame's size) and, per size, the rate of one
 * blocking upload (the server answers one byte when all has arrived) and one blocking download, best of
 * copy_reps(size) -- a synchronous cudaMemcpy's shape. SPIN_US > 0 makes both ends poll that long before sleeping in recv, as
 * rgpu does by default (RGPU_SPIN_US / --spin-us); run it with 0 and with rgpu's value to see both floors.
 * RAW_TCP_SEND_KIB=N: uploads go in sends of N KiB (default: one send), to see what a send's size costs -- a
 * sealed copy's stand-in sent 64 KiB pieces (bench/results/gpu-2026-12-04h-records).
 * Built and run by bench/rpc_bench.py. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tcp_io.h"

#define SERVER_BUF (16u << 20)
#define ECHO_SIZE 24

/* Server: 9-byte requests, 'E'|'U'|'D' + u64 n. E: n payload bytes, echoed with the header. U: n bytes in, one
 * byte out. D: n bytes out. */
static void *serve(void *arg)
{
    int fd = *(int *)arg;
    uint8_t *buf = malloc(SERVER_BUF);
    memset(buf, 1, SERVER_BUF);
    uint8_t head[9];
    while (buf && recv_all(fd, head, sizeof head) == 0) {
        uint64_t n;
        memcpy(&n, head + 1, 8);
        if (head[0] == 'E') {
            memcpy(buf, head, 9);
            if (n > SERVER_BUF - 9 || recv_all(fd, buf + 9, n) || send_all(fd, buf, n + 9))
                break;
        } else if (head[0] == 'U') {
            for (uint64_t left = n; left;) {
                size_t k = left < SERVER_BUF ? left : SERVER_BUF;
                ssize_t r = recv_some(fd, buf, k);
                if (r <= 0)
                    goto out;
                left -= (uint64_t)r;
            }
            if (send_all(fd, "k", 1))
                break;
        } else {
            for (uint64_t left = n; left;) {
                size_t k = left < SERVER_BUF ? left : SERVER_BUF;
                if (send_all(fd, buf, k))
                    goto out;
                left -= k;
            }
        }
    }
out:
    free(buf);
    close(fd);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* As bench/rpc_bench.py's copy_reps: 3 copies of a large size, up to 30 of a small one. */
static int copy_reps(uint64_t size)
{
    uint64_t n = (64ull << 20) / (size ? size : 1);
    return n < 3 ? 3 : n > 30 ? 30 : (int)n;
}

/* An upload's bytes, in sends of `piece` bytes (0: one send). */
static int send_pieces(int fd, const uint8_t *p, size_t n, size_t piece)
{
    for (size_t off = 0; off < n; off += piece ? piece : n)
        if (send_all(fd, p + off, piece && n - off > piece ? piece : n - off))
            return -1;
    return 0;
}

static int request(int fd, char op, uint64_t n)
{
    uint8_t head[9] = {(uint8_t)op};
    memcpy(head + 1, &n, 8);
    return send_all(fd, head, sizeof head);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s ECHO_COUNT SPIN_US [SIZE...]\n", argv[0]);
        return 2;
    }
    int echoes = atoi(argv[1]);
    const char *send_kib = getenv("RAW_TCP_SEND_KIB");
    size_t send_piece = send_kib && *send_kib ? (size_t)strtoull(send_kib, NULL, 10) << 10 : 0;
    spin_ns = strtoull(argv[2], NULL, 10) * 1000u;
    struct sockaddr_in addr;
    int cfd, sfd, lfd = listen_loopback(&addr, 1);
    if (lfd < 0) {
        perror("listen");
        return 1;
    }
    if (connect_pair(lfd, &addr, &cfd, &sfd)) {
        perror("connect");
        return 1;
    }
    /* RAW_TCP_PROCESSES=1: the server in a process of its own, as rgpu's worker is apart from its client (the
     * scheduler may place two threads of one process closer together than two processes). */
    const char *apart = getenv("RAW_TCP_PROCESSES");
    pid_t child = apart && *apart && strcmp(apart, "0") ? fork() : -1;
    pthread_t server;
    if (child == 0) {
        close(cfd);
        serve(&sfd);
        _exit(0);
    }
    if (child > 0)
        close(sfd);
    else
        pthread_create(&server, NULL, serve, &sfd); /* (also when fork failed) */

    uint8_t msg[ECHO_SIZE] = {'E'}, back[ECHO_SIZE];
    uint64_t payload = ECHO_SIZE - 9;
    memcpy(msg + 1, &payload, 8);
    uint64_t *lat = calloc((size_t)echoes + 1, sizeof *lat);
    for (int i = -500; i < echoes; i++) { /* the first 500 warm up */
        uint64_t t0 = now_ns();
        if (send_all(cfd, msg, sizeof msg) || recv_all(cfd, back, sizeof back))
            return 1;
        if (i >= 0)
            lat[i] = now_ns() - t0;
    }
    qsort(lat, (size_t)echoes, sizeof *lat, cmp_u64);
    printf("{\"spin_us\": %s, \"echo_p50_us\": %.2f, \"echo_p99_us\": %.2f, \"copy\": {", argv[2],
           echoes ? lat[echoes / 2] / 1e3 : 0.0, echoes ? lat[(int)(echoes * 0.99)] / 1e3 : 0.0);

    for (int a = 3; a < argc; a++) {
        uint64_t size = strtoull(argv[a], NULL, 10);
        uint8_t *data = malloc(size ? size : 1);
        memset(data, 2, size);
        double up = 1e30, down = 1e30;
        for (int rep = 0, reps = copy_reps(size); rep < reps; rep++) {
            uint64_t t0 = now_ns();
            char k;
            if (request(cfd, 'U', size) || send_pieces(cfd, data, size, send_piece) || recv_all(cfd, &k, 1))
                return 1;
            double t = (now_ns() - t0) / 1e9;
            up = t < up ? t : up;
            t0 = now_ns();
            if (request(cfd, 'D', size) || recv_all(cfd, data, size))
                return 1;
            t = (now_ns() - t0) / 1e9;
            down = t < down ? t : down;
        }
        printf("%s\"%llu\": [%.6g, %.6g]", a > 3 ? ", " : "", (unsigned long long)size, size / up, size / down);
        free(data);
    }
    printf("}}\n");
    shutdown(cfd, SHUT_RDWR);
    close(cfd);
    if (child > 0)
        waitpid(child, NULL, 0);
    else
        pthread_join(server, NULL);
    close(lfd);
    return 0;
}
