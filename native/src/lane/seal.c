/* Record protection in the C request loop (lane.h's rgpu_lane_seal): a sealed session's keys, one AEAD state per
 * direction keyed once (crypto.c, OpenSSL's libcrypto loaded at run time). Python stays the authority on the
 * counters: it sets them before each turn of the loop and takes them back after, so records either side opens
 * or seals follow one sequence. */
#include <stdlib.h>
#include <string.h>

#include "crypto.h"
#include "lane.h"
#include "serve_private.h"

struct rgpu_lane_seal {
    struct rgpu_aead rx, tx;
};

rgpu_lane_seal *rgpu_lane_seal_new(int cipher, const uint8_t *recv_key, const uint8_t *send_key)
{
    if ((cipher != RGPU_CIPHER_AES_256_GCM && cipher != RGPU_CIPHER_CHACHA20_POLY1305) || rgpu_crypto_load())
        return NULL;
    rgpu_lane_seal *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->rx.cipher = s->tx.cipher = cipher;
    memcpy(s->rx.key, recv_key, sizeof s->rx.key);
    memcpy(s->tx.key, send_key, sizeof s->tx.key);
    return s;
}

void rgpu_lane_seal_free(rgpu_lane_seal *s)
{
    if (!s)
        return;
    rgpu_aead_free(&s->rx);
    rgpu_aead_free(&s->tx);
    memset(s, 0, sizeof *s); /* (the keys) */
    free(s);
}

void rgpu_lane_seal_set_counters(rgpu_lane_seal *s, uint64_t recv, uint64_t send)
{
    s->rx.counter = recv, s->tx.counter = send;
}

void rgpu_lane_seal_counters(const rgpu_lane_seal *s, uint64_t *recv, uint64_t *send)
{
    *recv = s->rx.counter, *send = s->tx.counter;
}

int seal_counters_low(const rgpu_lane_seal *s)
{
    /* One turn of the loop takes at most one record each way per frame it serves: far from the end, so Python,
     * which refuses a counter at 2^63, sees every record near it. */
    return s->rx.counter < (1ull << 62) && s->tx.counter < (1ull << 62);
}

struct rgpu_aead *seal_rx(rgpu_lane_seal *s) { return &s->rx; }

struct rgpu_aead *seal_tx(rgpu_lane_seal *s) { return &s->tx; }
