/* The worker's copy links (native/src/lane/links.c) under ThreadSanitizer: a writer thread per link sends parts of
 * random sizes for ROUNDS linked copies, dealt round-robin as the C stand-ins deal them, while this thread takes
 * each part in order, checks its bytes and offset, and releases it; then a link that ends mid-part must fail its
 * take with a reason, and freeing the links while a thread waits in recv must return. Built and run by
 * tests/test_copy_links.py.
 *
 *   links_check ROUNDS   prints "ROUNDS rounds, no failure" and exits 0; names the failure and exits 1 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lane.h"
#include "rgpu_log.h"
#include "rgpu_ops.h"
#include "rgpu_wire.h"

void rgpu_log(int level, const char *fmt, ...) /* (crypto.c's; unused by plain links) */
{
    (void)level, (void)fmt;
}

#define LINKS 3
#define PART_MAX 4096

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); return 1; } while (0)

static int rounds;
static uint32_t sizes[4096]; /* per copy: its size (parts of PART_MAX, the last shorter) */

static uint8_t byte_at(uint32_t seq, uint64_t offset) { return (uint8_t)(seq * 131u + offset * 7u + (offset >> 8)); }

static int send_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0)
            return -1;
        p += k, n -= (size_t)k;
    }
    return 0;
}

struct writer {
    int fd;
    unsigned link;
};

static void *write_parts(void *arg)
{
    struct writer *w = arg;
    uint8_t frame[RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + RGPU_LINK_PART_REQ_SIZE + PART_MAX];
    for (int seq = 1; seq <= rounds; seq++) {
        uint32_t size = sizes[seq], parts = (size + PART_MAX - 1) / PART_MAX;
        for (uint32_t j = w->link; j < parts; j += LINKS) {
            uint64_t off = (uint64_t)j * PART_MAX;
            uint32_t n = size - off < PART_MAX ? (uint32_t)(size - off) : PART_MAX;
            rgpu_header h = {RGPU_OP_LINK_PART, RGPU_FLAG_NO_REPLY, 0, 0, 0, n};
            rgpu_pack_prefix_header(frame, &h, RGPU_LINK_PART_REQ_SIZE);
            rgpu_pack_link_part(frame + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE,
                                &(struct rgpu_link_part_req){.seq = (uint32_t)seq, .part = j, .offset = off});
            uint8_t *bulk = frame + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + RGPU_LINK_PART_REQ_SIZE;
            for (uint32_t i = 0; i < n; i++)
                bulk[i] = byte_at((uint32_t)seq, off + i);
            if (send_all(w->fd, frame, (size_t)(bulk - frame) + n))
                return NULL;
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    rounds = argc > 1 ? atoi(argv[1]) : 200;
    if (rounds < 1 || rounds >= 4096)
        FAIL("ROUNDS: 1..4095");
    srand(7);
    for (int seq = 1; seq <= rounds; seq++)
        sizes[seq] = 1 + (uint32_t)rand() % (PART_MAX * 7);
    rgpu_lane_links *l = rgpu_lane_links_new(LINKS, PART_MAX, 0, NULL);
    if (!l)
        FAIL("rgpu_lane_links_new failed");
    struct writer w[LINKS];
    pthread_t t[LINKS];
    for (unsigned i = 0; i < LINKS; i++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) || rgpu_lane_links_attach(l, i, sv[1]))
            FAIL("link %u: no socket pair or not attached", i);
        w[i] = (struct writer){sv[0], i};
        pthread_create(&t[i], NULL, write_parts, &w[i]);
    }
    char why[256];
    for (int seq = 1; seq <= rounds; seq++) {
        uint32_t parts = (sizes[seq] + PART_MAX - 1) / PART_MAX;
        uint64_t done = 0;
        for (uint32_t j = 0; j < parts; j++) {
            const uint8_t *data;
            uint64_t offset;
            uint32_t len;
            int got = rgpu_lane_links_take(l, j % LINKS, (uint32_t)seq, j, 5000, &data, &offset, &len, why, sizeof why);
            if (got != 1)
                FAIL("copy %d part %u: take gave %d (%s)", seq, j, got, got < 0 ? why : "timed out");
            if (offset != done)
                FAIL("copy %d part %u: offset %llu, %llu due", seq, j, (unsigned long long)offset,
                     (unsigned long long)done);
            for (uint32_t i = 0; i < len; i++)
                if (data[i] != byte_at((uint32_t)seq, offset + i))
                    FAIL("copy %d part %u: byte %u differs", seq, j, i);
            rgpu_lane_links_release(l, j % LINKS);
            done += len;
        }
        if (done != sizes[seq])
            FAIL("copy %d: %llu bytes, %u sent", seq, (unsigned long long)done, sizes[seq]);
    }
    for (unsigned i = 0; i < LINKS; i++)
        pthread_join(t[i], NULL);
    /* Link 0 ends halfway through a part's bulk: its take fails saying so. */
    uint8_t head[RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE + RGPU_LINK_PART_REQ_SIZE + 10];
    rgpu_header h = {RGPU_OP_LINK_PART, RGPU_FLAG_NO_REPLY, 0, 0, 0, 100};
    rgpu_pack_prefix_header(head, &h, RGPU_LINK_PART_REQ_SIZE);
    rgpu_pack_link_part(head + RGPU_PREFIX_SIZE + RGPU_HEADER_SIZE,
                        &(struct rgpu_link_part_req){.seq = (uint32_t)rounds + 1, .part = 0, .offset = 0});
    memset(head + sizeof head - 10, 1, 10);
    if (send_all(w[0].fd, head, sizeof head))
        FAIL("could not send the short part");
    close(w[0].fd);
    const uint8_t *data;
    uint64_t offset;
    uint32_t len;
    int got = rgpu_lane_links_take(l, 0, (uint32_t)rounds + 1, 0, 5000, &data, &offset, &len, why, sizeof why);
    if (got != -1 || !strstr(why, "ended or failed in a part"))
        FAIL("a link that ended mid-part: take gave %d (%s)", got, got < 0 ? why : "");
    /* Links 1 and 2 wait in recv for parts that never come: freeing the links ends their threads. */
    rgpu_lane_links_free(l);
    for (unsigned i = 1; i < LINKS; i++)
        close(w[i].fd);
    printf("%d rounds, no failure\n", rounds);
    return 0;
}
