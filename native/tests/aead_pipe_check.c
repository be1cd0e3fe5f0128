/* The AEAD pipe (native/src/aead_pipe.c) against the same work done on one thread: records of many sizes sealed
 * and opened through the pipe must match byte for byte, tag included, with the helper awake and woken from sleep;
 * a tampered record must fail; a fault the helper raises in a program's tracked buffer must reach the program's
 * handler; a hold taken elsewhere must leave a second caller without the pipe; a forked child must get a helper
 * of its own. Built and run by tests/test_hostile_server.py (under ThreadSanitizer where
 * the compiler has it).
 *
 *   aead_pipe_check ROUNDS   prints "ROUNDS rounds, no failure" and exits 0; names the failure and exits 1; exits 2
 *                            where the pipe is not used (one CPU, RGPU_AEAD_PIPE=0) */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "aead_pipe.h"
#include "crypto.h"
#include "rgpu_log.h"

void rgpu_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "log %d: ", level);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); return 1; } while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint8_t next_byte(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint8_t)rng;
}

static void aead_for(struct rgpu_aead *a, int cipher, const uint8_t key[32], uint64_t counter)
{
    memset(a, 0, sizeof *a);
    a->cipher = cipher, a->counter = counter;
    memcpy(a->key, key, 32);
}

/* One record's update through the pipe, in its pieces (out of place when out != in). */
static int piped(struct rgpu_aead *a, const uint8_t *in, uint8_t *out, size_t n)
{
    struct rgpu_aead_pipe *p = rgpu_aead_pipe_acquire();
    if (!p)
        return -1;
    for (size_t off = 0, k; off < n; off += k) {
        k = n - off < RGPU_AEAD_PIPE_PIECE ? n - off : RGPU_AEAD_PIPE_PIECE;
        rgpu_aead_pipe_give(p, a, in + off, k, out + off);
        if (rgpu_aead_pipe_given(p) % 3 == 0) /* (the caller helping, racing the helper for the next piece) */
            rgpu_aead_pipe_help(p, 1);
        if (rgpu_aead_pipe_given(p) % 5 == 0 && rgpu_aead_pipe_take(p, rgpu_aead_pipe_given(p) - 2))
            return -1;
    }
    return rgpu_aead_pipe_release(p);
}

static int one_round(int cipher, const uint8_t key[32], uint64_t counter, size_t n)
{
    static const uint8_t aad[4] = {1, 2, 3, 4};
    uint8_t *plain = malloc(n + 1), *serial = malloc(n + 1), *through = malloc(n + 1), tag1[16], tag2[16];
    struct rgpu_aead a1, a2, o;
    int bad = !plain || !serial || !through;
    for (size_t i = 0; !bad && i < n; i++)
        plain[i] = next_byte();
    aead_for(&a1, cipher, key, counter), aead_for(&a2, cipher, key, counter), aead_for(&o, cipher, key, counter);
    bad = bad || rgpu_aead_begin(&a1, 1, aad) || rgpu_aead_update(&a1, plain, n, serial) ||
          rgpu_aead_seal_end(&a1, tag1);
    memcpy(through, plain, n);
    bad = bad || rgpu_aead_begin(&a2, 1, aad) || piped(&a2, through, through, n) || rgpu_aead_seal_end(&a2, tag2);
    if (bad || memcmp(serial, through, n) || memcmp(tag1, tag2, 16))
        FAIL("sealing %zu bytes through the pipe differs from sealing them on one thread", n);
    if (rgpu_aead_begin(&o, 0, aad) || piped(&o, through, serial, n) || rgpu_aead_open_end(&o, tag2) ||
        memcmp(serial, plain, n))
        FAIL("opening %zu bytes through the pipe did not give them back", n);
    through[n / 2] ^= 1;
    aead_for(&o, cipher, key, counter);
    if (rgpu_aead_begin(&o, 0, aad) || piped(&o, through, serial, n) || !rgpu_aead_open_end(&o, tag2))
        FAIL("a tampered record of %zu bytes opened through the pipe", n);
    rgpu_aead_free(&a1), rgpu_aead_free(&a2), rgpu_aead_free(&o);
    free(plain), free(serial), free(through);
    return 0;
}

/* A program that tracks its pages (mprotect, then a SIGSEGV handler that lets the first touch through, as garbage
 * collectors do) hands such a buffer to a copy: the helper's read must raise the fault the program handles. */
static uint8_t *tracked;
static size_t tracked_len;

static void on_fault(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)uc;
    uint8_t *at = si->si_addr;
    if (at < tracked || at >= tracked + tracked_len || mprotect(tracked, tracked_len, PROT_READ | PROT_WRITE))
        _exit(98);
}

static int tracked_round(const uint8_t key[32])
{
    tracked_len = 1u << 20;
    tracked = mmap(NULL, tracked_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *out = malloc(tracked_len), tag[16];
    static const uint8_t aad[4];
    struct rgpu_aead a;
    struct sigaction sa = {.sa_sigaction = on_fault, .sa_flags = SA_SIGINFO}, old;
    if (tracked == MAP_FAILED || !out || sigaction(SIGSEGV, &sa, &old))
        FAIL("no tracked buffer");
    memset(tracked, 7, tracked_len);
    mprotect(tracked, tracked_len, PROT_NONE);
    aead_for(&a, RGPU_CIPHER_AES_256_GCM, key, 99);
    struct rgpu_aead_pipe *p = rgpu_aead_pipe_acquire();
    if (!p || rgpu_aead_begin(&a, 1, aad))
        FAIL("no pipe for the tracked buffer");
    for (size_t off = 0; off < tracked_len; off += RGPU_AEAD_PIPE_PIECE)
        rgpu_aead_pipe_give(p, &a, tracked + off, RGPU_AEAD_PIPE_PIECE, out + off);
    for (int i = 0; i < 20000 && rgpu_aead_pipe_done(p) < rgpu_aead_pipe_given(p); i++) /* (the helper's, all) */
        nanosleep(&(struct timespec){0, 100000}, NULL);
    if (rgpu_aead_pipe_done(p) < rgpu_aead_pipe_given(p) || rgpu_aead_pipe_release(p) || rgpu_aead_seal_end(&a, tag))
        FAIL("sealing a tracked buffer through the pipe failed");
    sigaction(SIGSEGV, &old, NULL);
    munmap(tracked, tracked_len);
    free(out);
    rgpu_aead_free(&a);
    return 0;
}

static void *try_acquire(void *got)
{
    struct rgpu_aead_pipe *p = rgpu_aead_pipe_acquire();
    *(int *)got = p != NULL;
    if (p)
        rgpu_aead_pipe_release(p);
    return NULL;
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {1, 65535, 65536, 65537, 200000, 1u << 20, (3u << 20) + 7};
    int rounds = argc > 1 ? atoi(argv[1]) : 50;
    uint8_t key[32];
    for (int i = 0; i < 32; i++)
        key[i] = next_byte();
    if (rgpu_crypto_load())
        FAIL("libcrypto could not be loaded");
    struct rgpu_aead_pipe *probe = rgpu_aead_pipe_acquire();
    if (!probe) {
        printf("no pipe here (one CPU, or RGPU_AEAD_PIPE=0)\n");
        return 2;
    }
    rgpu_aead_pipe_release(probe);
    for (int r = 0; r < rounds; r++) {
        int cipher = r % 2 ? RGPU_CIPHER_CHACHA20_POLY1305 : RGPU_CIPHER_AES_256_GCM;
        if (one_round(cipher, key, (uint64_t)r * 3, sizes[r % (sizeof sizes / sizeof *sizes)]))
            return 1;
        if (r % 7 == 6) /* longer than the helper polls: it sleeps, and the next piece must wake it */
            nanosleep(&(struct timespec){0, 2000000}, NULL);
    }
    if (tracked_round(key))
        return 1;
    struct rgpu_aead_pipe *held = rgpu_aead_pipe_acquire();
    int other = -1;
    pthread_t t;
    if (!held || pthread_create(&t, NULL, try_acquire, &other) || pthread_join(t, NULL) || other != 0)
        FAIL("a second caller got the pipe while it was held (%d)", other);
    rgpu_aead_pipe_release(held);
    pid_t child = fork();
    if (child == 0)
        _exit(one_round(RGPU_CIPHER_AES_256_GCM, key, 7, 1u << 20) ? 3 : 0);
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status))
        FAIL("the pipe failed in a forked child (status %d)", status);
    printf("%d rounds, no failure\n", rounds);
    return 0;
}
