/* What splitting one blocking upload over several TCP connections would buy on this host, before rgpu is built
 * to do it: plain C, no protocol, over 127.0.0.1 only.
 *
 *   tcp_streams SIZE SPIN_US STREAMS...      e.g. tcp_streams 524288 300 1 2 4 8
 *
 * For each stream count N: N connections, a sending thread per connection on the client's side and a receiving
 * thread per connection on the server's; one upload of SIZE bytes goes as N parts of SIZE/N (the last takes the
 * rest), each in one send on its own connection, and is done when every receiver has answered one byte -- the
 * shape of a synchronous copy whose bytes travel apart, as llama.cpp's prompt inputs would. Best of REPS
 * (env TCP_STREAMS_REPS, default 30) uploads after 5 to warm up. SPIN_US > 0: both ends poll that long before
 * sleeping in recv, as rgpu does. One JSON line: {"size": SIZE, "spin_us": SPIN_US, "gbps": {"N": rate, ...}}.
 *
 * Why: a prompt's inputs cross loopback TCP at one connection's rate (one core on each end copying), where the
 * native copy crosses PCIe at several times that (bench/results/gpu-2026-12-04e-bench-reps); how close N
 * connections come is the ceiling of that design. */
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
#include <time.h>
#include <unistd.h>

#include "tcp_io.h"

#define MAX_STREAMS 16
#define MAX_COUNTS 16 /* stream counts one run measures */

/* One connection's two ends: the server's receiver takes `part` bytes per upload into its own buffer (as a
 * worker's receiving thread would take them into its slots) and answers one byte; the client's sender sends its
 * part of `data` when the round's barrier opens and waits for that byte, noting when it began sending and when the
 * byte came (the round's time runs from the first sender's start to the last one's answer: the barrier's wake-ups
 * are not the upload's). */
struct lane {
    int client_fd, server_fd;
    size_t offset, part;
    const uint8_t *data;
    pthread_barrier_t *start, *done;
    int rounds, send_failed, receive_failed;
    uint64_t began, answered;
    pthread_t sender, receiver;
};

static void *receive_parts(void *arg)
{
    struct lane *l = arg;
    uint8_t *buf = malloc(l->part);
    for (int r = 0; r < l->rounds; r++)
        if (!buf || recv_all(l->server_fd, buf, l->part) || send_all(l->server_fd, "k", 1)) {
            l->receive_failed = 1;
            shutdown(l->server_fd, SHUT_RDWR); /* (the sender waiting for its answer gets the end instead) */
            break;
        }
    free(buf);
    return NULL;
}

static void *send_parts(void *arg)
{
    struct lane *l = arg;
    char k;
    for (int r = 0; r < l->rounds; r++) {
        pthread_barrier_wait(l->start);
        l->began = now_ns();
        if (!l->send_failed && (send_all(l->client_fd, l->data + l->offset, l->part) || recv_all(l->client_fd, &k, 1)))
            l->send_failed = 1;
        l->answered = now_ns();
        pthread_barrier_wait(l->done);
    }
    return NULL;
}

static void fail(const char *what)
{
    fprintf(stderr, "tcp_streams: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* The best upload's rate in bytes per second over `streams` connections, or a negative number on failure. */
static double upload_rate(int lfd, const struct sockaddr_in *addr, const uint8_t *data, size_t size, int streams,
                          int reps)
{
    const int warm = 5, rounds = warm + reps;
    struct lane lanes[MAX_STREAMS];
    pthread_barrier_t start, done;
    pthread_barrier_init(&start, NULL, (unsigned)streams + 1);
    pthread_barrier_init(&done, NULL, (unsigned)streams + 1);
    size_t each = size / (size_t)streams;
    for (int i = 0; i < streams; i++) {
        struct lane *l = &lanes[i];
        *l = (struct lane){.offset = each * (size_t)i, .part = i == streams - 1 ? size - each * (size_t)i : each,
                           .data = data, .start = &start, .done = &done, .rounds = rounds};
        /* (threads of earlier connections wait at the barrier: a set-up failure ends the program) */
        if (connect_pair(lfd, addr, &l->client_fd, &l->server_fd))
            fail("connecting over 127.0.0.1");
        if ((errno = pthread_create(&l->receiver, NULL, receive_parts, l)) ||
            (errno = pthread_create(&l->sender, NULL, send_parts, l)))
            fail("starting a thread");
    }
    double best = 1e30;
    for (int r = 0; r < rounds; r++) {
        pthread_barrier_wait(&start);
        pthread_barrier_wait(&done);
        uint64_t first = UINT64_MAX, last = 0;
        for (int i = 0; i < streams; i++) {
            first = lanes[i].began < first ? lanes[i].began : first;
            last = lanes[i].answered > last ? lanes[i].answered : last;
        }
        double t = (last - first) / 1e9;
        if (r >= warm && t < best)
            best = t;
    }
    int failed = 0;
    for (int i = 0; i < streams; i++) {
        pthread_join(lanes[i].sender, NULL);
        shutdown(lanes[i].client_fd, SHUT_RDWR); /* (a receiver still waiting for a failed part gets its end) */
        pthread_join(lanes[i].receiver, NULL);
        failed |= lanes[i].send_failed | lanes[i].receive_failed;
        close(lanes[i].client_fd);
        close(lanes[i].server_fd);
    }
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&done);
    return failed ? -1 : size / best;
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc - 3 > MAX_COUNTS) {
        fprintf(stderr, "usage: %s SIZE SPIN_US STREAMS... (up to %d counts)\n", argv[0], MAX_COUNTS);
        return 2;
    }
    size_t size = strtoull(argv[1], NULL, 10);
    unsigned long long spin_us = strtoull(argv[2], NULL, 10);
    spin_ns = spin_us * 1000u;
    const char *reps_env = getenv("TCP_STREAMS_REPS");
    int reps = reps_env && atoi(reps_env) > 0 ? atoi(reps_env) : 30;
    for (int a = 3; a < argc; a++) {
        int streams = atoi(argv[a]);
        if (streams < 1 || streams > MAX_STREAMS || (size_t)streams > size) {
            fprintf(stderr, "tcp_streams: SIZE is at least 1, stream counts 1 to %d and at most SIZE\n", MAX_STREAMS);
            return 2;
        }
    }
    struct sockaddr_in addr;
    int lfd = listen_loopback(&addr, MAX_STREAMS);
    if (lfd < 0)
        fail("listening on 127.0.0.1");
    uint8_t *data = malloc(size);
    double rates[MAX_COUNTS];
    if (!data)
        fail("allocating the upload");
    memset(data, 3, size);
    for (int a = 3; a < argc; a++) {
        int streams = atoi(argv[a]);
        if ((rates[a - 3] = upload_rate(lfd, &addr, data, size, streams, reps)) < 0) {
            fprintf(stderr, "tcp_streams: an upload over %d connections failed\n", streams);
            return 1;
        }
    }
    /* (one line, once every count is measured: a failure leaves no half-written JSON) */
    printf("{\"size\": %zu, \"spin_us\": %llu, \"gbps\": {", size, spin_us);
    for (int a = 3; a < argc; a++)
        printf("%s\"%d\": %.3f", a > 3 ? ", " : "", atoi(argv[a]), rates[a - 3] / 1e9);
    printf("}}\n");
    free(data);
    close(lfd);
    return 0;
}
