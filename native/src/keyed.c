/* Records of a fixed size by a 64-bit key (keyed.h). */
#include <stdlib.h>
#include <string.h>

#include "keyed.h"

struct rgpu_keyed_node {
    struct rgpu_keyed_node *next;
    uint64_t key;
    size_t size;
    unsigned char record[];
};

int rgpu_keyed_put(struct rgpu_keyed *k, uint64_t key, const void *record, size_t size)
{
    struct rgpu_keyed_node *n = malloc(sizeof *n + size);
    if (!n)
        return -1;
    n->key = key;
    n->size = size;
    memcpy(n->record, record, size);
    pthread_mutex_lock(&k->lock);
    n->next = k->head;
    k->head = n;
    pthread_mutex_unlock(&k->lock);
    return 0;
}

/* Copy the record of `key` out (at most `size` bytes); with `take`, unlink and free it too. */
static int find(struct rgpu_keyed *k, uint64_t key, void *record, size_t size, int take)
{
    pthread_mutex_lock(&k->lock);
    struct rgpu_keyed_node **p = &k->head;
    while (*p && (*p)->key != key)
        p = &(*p)->next;
    struct rgpu_keyed_node *n = *p;
    if (n && record)
        memcpy(record, n->record, size < n->size ? size : n->size);
    if (n && take)
        *p = n->next;
    pthread_mutex_unlock(&k->lock);
    if (n && take)
        free(n);
    return n ? 0 : -1;
}

int rgpu_keyed_get(struct rgpu_keyed *k, uint64_t key, void *record, size_t size)
{
    return find(k, key, record, size, 0);
}

int rgpu_keyed_take(struct rgpu_keyed *k, uint64_t key, void *record, size_t size)
{
    return find(k, key, record, size, 1);
}
