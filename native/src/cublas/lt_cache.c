/* cuBLASLt heuristics answered from memory. The answer depends only on the request's bytes (the matmul
 * description, four layouts, the preference and the count asked for) and on the server's GPU and library,
 * which do not change while the program runs. PyTorch asks again before every matmul; each ask was a blocking
 * round trip, and behind it the client waited for the server to run everything queued before it, so a
 * ResNet-18 step waited once and a GPT training step sixteen times. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"
#include "fork_locks.h"

/* Set-associative, least recently used out: a training step asks a few dozen distinct questions (shapes times
 * alignments), which a direct-mapped table of this size let collide often enough that a pair of them evicted
 * each other every step, each time a round trip. */
#define SETS 128
#define WAYS 8

struct answer {
    uint64_t hash, used;
    int requested, count;
    size_t key_len;
    uint8_t *key, *results;
};

static struct answer slots[SETS][WAYS];
static uint64_t clock_now; /* under the lock: the order of uses */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
RGPU_FORK_RESET(lock, &lock)

static uint64_t hash_of(const uint8_t *key, size_t len, int requested)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)(unsigned)requested;
    for (size_t i = 0; i < len; i++)
        h = (h ^ key[i]) * 1099511628211ull;
    return h;
}

static struct answer *find(uint64_t h, const uint8_t *key, size_t len, int requested) /* under the lock */
{
    for (int w = 0; w < WAYS; w++) {
        struct answer *a = &slots[h % SETS][w];
        if (a->key && a->hash == h && a->requested == requested && a->key_len == len && !memcmp(a->key, key, len))
            return a;
    }
    return NULL;
}

int rgpu_lt_cache_get(const uint8_t *key, size_t len, int requested, void *results, size_t item_size)
{
    uint64_t h = hash_of(key, len, requested);
    int count = -1;
    pthread_mutex_lock(&lock);
    struct answer *a = find(h, key, len, requested);
    if (a) {
        memcpy(results, a->results, (size_t)a->count * item_size);
        count = a->count;
        a->used = ++clock_now;
    }
    pthread_mutex_unlock(&lock);
    return count;
}

void rgpu_lt_cache_put(const uint8_t *key, size_t len, int requested, const void *results, int count,
                       size_t item_size)
{
    uint8_t *k = malloc(len ? len : 1), *r = malloc(count > 0 ? (size_t)count * item_size : 1);
    if (!k || !r) { /* an answer not kept costs a round trip next time, nothing more */
        free(k), free(r);
        return;
    }
    memcpy(k, key, len);
    memcpy(r, results, (size_t)count * item_size);
    uint64_t h = hash_of(key, len, requested);
    pthread_mutex_lock(&lock);
    struct answer *a = find(h, key, len, requested); /* another thread asked the same meanwhile */
    if (!a) { /* an empty way, else the least recently used */
        struct answer *set = slots[h % SETS];
        a = &set[0];
        for (int w = 0; w < WAYS; w++) {
            if (!set[w].key) {
                a = &set[w];
                break;
            }
            if (set[w].used < a->used)
                a = &set[w];
        }
    }
    free(a->key), free(a->results);
    *a = (struct answer){h, ++clock_now, requested, count, len, k, r};
    pthread_mutex_unlock(&lock);
}
