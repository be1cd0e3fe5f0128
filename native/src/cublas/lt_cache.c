/* cuBLASLt heuristics answered from memory. The answer depends only on the request's bytes (the matmul
 * description, four layouts, the preference and the count asked for) and on the server's GPU and library,
 * which do not change while the program runs. PyTorch asks again before every matmul; each ask was a blocking
 * round trip, and behind it the client waited for the server to run everything queued before it, so a
 * ResNet-18 step waited once and a GPT training step sixteen times. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "blas.h"

#define SLOTS 512 /* direct-mapped by hash: a collision replaces the older answer */

struct answer {
    uint64_t hash;
    int requested, count;
    size_t key_len;
    uint8_t *key, *results;
};

static struct answer slots[SLOTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t hash_of(const uint8_t *key, size_t len, int requested)
{
    uint64_t h = 1469598103934665603ull ^ (uint64_t)(unsigned)requested;
    for (size_t i = 0; i < len; i++)
        h = (h ^ key[i]) * 1099511628211ull;
    return h;
}

int rgpu_lt_cache_get(const uint8_t *key, size_t len, int requested, void *results, size_t item_size)
{
    uint64_t h = hash_of(key, len, requested);
    int count = -1;
    pthread_mutex_lock(&lock);
    struct answer *a = &slots[h % SLOTS];
    if (a->key && a->hash == h && a->requested == requested && a->key_len == len && !memcmp(a->key, key, len)) {
        memcpy(results, a->results, (size_t)a->count * item_size);
        count = a->count;
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
    struct answer *a = &slots[h % SLOTS];
    free(a->key), free(a->results);
    *a = (struct answer){h, requested, count, len, k, r};
    pthread_mutex_unlock(&lock);
}
