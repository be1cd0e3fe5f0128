/* Records of a fixed size by a 64-bit key, behind a lock: what the stand-in keeps of the few arrays and texture and
 * surface objects a program holds (their descriptions, which CUDA's Get* calls answer from here). A list walked
 * from the newest: programs hold tens of these, not thousands. */
#ifndef RGPU_KEYED_H
#define RGPU_KEYED_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct rgpu_keyed_node;
struct rgpu_keyed {
    pthread_mutex_t lock;
    struct rgpu_keyed_node *head;
};
#define RGPU_KEYED_INIT {PTHREAD_MUTEX_INITIALIZER, NULL}

int rgpu_keyed_put(struct rgpu_keyed *k, uint64_t key, const void *record, size_t size); /* -1: out of memory */
int rgpu_keyed_get(struct rgpu_keyed *k, uint64_t key, void *record, size_t size);       /* -1: no such key */
int rgpu_keyed_take(struct rgpu_keyed *k, uint64_t key, void *record, size_t size);      /* get, then forget */

#endif
