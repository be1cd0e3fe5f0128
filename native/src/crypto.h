/* PSK handshake primitives and record protection, on OpenSSL's libcrypto loaded at run time (dlopen), so
 * building the shim needs no OpenSSL headers and programs that never use a PSK never load libcrypto. */
#ifndef RGPU_CRYPTO_H
#define RGPU_CRYPTO_H

#include <stddef.h>
#include <stdint.h>

#include "rgpu_consts.h" /* RGPU_CIPHER_* */

struct rgpu_aead {
    int cipher;
    uint8_t key[32];
    uint64_t counter;
    void *ctx;   /* OpenSSL cipher context, keyed on first use (one direction per struct) */
    int encrypt;
};

int rgpu_crypto_load(void); /* 0, or -1 (logged) */
int rgpu_sha256(const void *data, size_t len, uint8_t out[32]); /* sha256.c: no libcrypto needed */
int rgpu_hmac_sha256(const void *key, size_t key_len, const void *data, size_t len, uint8_t out[32]);
int rgpu_hkdf_sha256(const void *ikm, size_t ikm_len, const void *salt, size_t salt_len, const void *info,
                     size_t info_len, uint8_t *out, size_t out_len);
/* A record sealed or opened piece by piece, so that a big one is encrypted while it is sent and decrypted where
 * it is going as it arrives, instead of copied whole into a buffer first: begin (the next counter's nonce, aad),
 * update any number of times (out may be in: in place), then end, which writes the tag (sealing) or checks it
 * (opening; -1 if authentication fails, and then nothing update wrote may be used). Each struct seals or opens,
 * never both. */
int rgpu_aead_begin(struct rgpu_aead *a, int encrypt, const uint8_t aad[4]);
int rgpu_aead_update(struct rgpu_aead *a, const uint8_t *in, size_t len, uint8_t *out);
int rgpu_aead_seal_end(struct rgpu_aead *a, uint8_t tag[16]);
int rgpu_aead_open_end(struct rgpu_aead *a, const uint8_t tag[16]);
/* The same for a whole record at once. out gets len + 16 bytes (ciphertext, tag). aad is the record's 4-byte
 * length prefix. */
int rgpu_aead_seal(struct rgpu_aead *a, const uint8_t aad[4], const uint8_t *in, size_t len, uint8_t *out);
/* in is ciphertext + tag (len includes the tag); out gets len - 16 bytes. -1 if authentication fails. */
int rgpu_aead_open(struct rgpu_aead *a, const uint8_t aad[4], const uint8_t *in, size_t len, uint8_t *out);
void rgpu_aead_free(struct rgpu_aead *a);

#endif
