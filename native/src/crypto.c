#include "crypto.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "rgpu_log.h"
#include "rgpu_wire.h"

typedef struct evp_md_st EVP_MD;
typedef struct evp_cipher_st EVP_CIPHER;
typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;

#define CTRL_AEAD_SET_IVLEN 0x9
#define CTRL_AEAD_GET_TAG 0x10
#define CTRL_AEAD_SET_TAG 0x11

static struct {
    const EVP_MD *(*sha256)(void);
    unsigned char *(*hmac)(const EVP_MD *, const void *, int, const unsigned char *, size_t, unsigned char *,
                           unsigned int *);
    const EVP_CIPHER *(*aes_256_gcm)(void);
    const EVP_CIPHER *(*chacha20_poly1305)(void);
    EVP_CIPHER_CTX *(*ctx_new)(void);
    void (*ctx_free)(EVP_CIPHER_CTX *);
    int (*ctx_ctrl)(EVP_CIPHER_CTX *, int, int, void *);
    int (*enc_init)(EVP_CIPHER_CTX *, const EVP_CIPHER *, void *, const unsigned char *, const unsigned char *);
    int (*enc_update)(EVP_CIPHER_CTX *, unsigned char *, int *, const unsigned char *, int);
    int (*enc_final)(EVP_CIPHER_CTX *, unsigned char *, int *);
    int (*dec_init)(EVP_CIPHER_CTX *, const EVP_CIPHER *, void *, const unsigned char *, const unsigned char *);
    int (*dec_update)(EVP_CIPHER_CTX *, unsigned char *, int *, const unsigned char *, int);
    int (*dec_final)(EVP_CIPHER_CTX *, unsigned char *, int *);
} C;

static int loaded = 0;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
    const char *names[] = {"libcrypto.so.3", "libcrypto.so", NULL};
    void *lib = NULL;
    for (int i = 0; names[i] && !lib; i++)
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        rgpu_log(RGPU_LOG_ERROR, "PSK needs OpenSSL 3 (libcrypto.so.3), which could not be loaded: %s", dlerror());
        return;
    }
#define SYM(field, name) if (!(*(void **)&C.field = dlsym(lib, name))) { \
        rgpu_log(RGPU_LOG_ERROR, "libcrypto lacks %s", name); return; }
    SYM(sha256, "EVP_sha256");
    SYM(hmac, "HMAC");
    SYM(aes_256_gcm, "EVP_aes_256_gcm");
    SYM(chacha20_poly1305, "EVP_chacha20_poly1305");
    SYM(ctx_new, "EVP_CIPHER_CTX_new");
    SYM(ctx_free, "EVP_CIPHER_CTX_free");
    SYM(ctx_ctrl, "EVP_CIPHER_CTX_ctrl");
    SYM(enc_init, "EVP_EncryptInit_ex");
    SYM(enc_update, "EVP_EncryptUpdate");
    SYM(enc_final, "EVP_EncryptFinal_ex");
    SYM(dec_init, "EVP_DecryptInit_ex");
    SYM(dec_update, "EVP_DecryptUpdate");
    SYM(dec_final, "EVP_DecryptFinal_ex");
#undef SYM
    loaded = 1;
}

int rgpu_crypto_load(void)
{
    pthread_once(&once, load);
    return loaded ? 0 : -1;
}

int rgpu_hmac_sha256(const void *key, size_t key_len, const void *data, size_t len, uint8_t out[32])
{
    unsigned int n = 32;
    if (rgpu_crypto_load())
        return -1;
    return C.hmac(C.sha256(), key, (int)key_len, data, len, out, &n) ? 0 : -1;
}

/* RFC 5869 with HMAC-SHA256; out_len <= 255 * 32. */
int rgpu_hkdf_sha256(const void *ikm, size_t ikm_len, const void *salt, size_t salt_len, const void *info,
                     size_t info_len, uint8_t *out, size_t out_len)
{
    uint8_t prk[32], t[32], block[32 + 256 + 1];
    if (info_len > 256 || rgpu_hmac_sha256(salt, salt_len, ikm, ikm_len, prk))
        return -1;
    size_t done = 0, tlen = 0;
    for (uint8_t i = 1; done < out_len; i++) {
        memcpy(block, t, tlen);
        memcpy(block + tlen, info, info_len);
        block[tlen + info_len] = i;
        if (rgpu_hmac_sha256(prk, 32, block, tlen + info_len + 1, t))
            return -1;
        tlen = 32;
        size_t n = out_len - done < 32 ? out_len - done : 32;
        memcpy(out + done, t, n);
        done += n;
    }
    return 0;
}

static void nonce_for(uint64_t counter, uint8_t nonce[12])
{
    memset(nonce, 0, 4);
    rgpu_put_u64(nonce + 4, counter);
}

static const EVP_CIPHER *cipher_of(const struct rgpu_aead *a)
{
    return a->cipher == RGPU_CIPHER_AES_256_GCM ? C.aes_256_gcm() : C.chacha20_poly1305();
}

/* The key schedule and cipher lookup are done once per direction (OpenSSL 3 fetches the cipher on every full
 * init, which costs more than sealing a small record); each record then only sets its nonce. */
static EVP_CIPHER_CTX *keyed(struct rgpu_aead *a, int encrypt)
{
    if (!a->ctx) {
        EVP_CIPHER_CTX *ctx = C.ctx_new();
        int (*init)(EVP_CIPHER_CTX *, const EVP_CIPHER *, void *, const unsigned char *, const unsigned char *) =
            encrypt ? C.enc_init : C.dec_init;
        if (!ctx || init(ctx, cipher_of(a), NULL, NULL, NULL) != 1 ||
            C.ctx_ctrl(ctx, CTRL_AEAD_SET_IVLEN, 12, NULL) != 1 || init(ctx, NULL, NULL, a->key, NULL) != 1) {
            if (ctx)
                C.ctx_free(ctx);
            return NULL;
        }
        a->ctx = ctx;
        a->encrypt = encrypt;
    }
    return a->encrypt == encrypt ? a->ctx : NULL; /* one direction per rgpu_aead */
}

void rgpu_aead_free(struct rgpu_aead *a)
{
    if (a->ctx)
        C.ctx_free(a->ctx);
    a->ctx = NULL;
}

int rgpu_aead_begin(struct rgpu_aead *a, int encrypt, const uint8_t aad[4])
{
    uint8_t nonce[12];
    int n = 0;
    if (rgpu_crypto_load())
        return -1;
    EVP_CIPHER_CTX *ctx = keyed(a, encrypt);
    if (!ctx)
        return -1;
    nonce_for(a->counter++, nonce);
    if (encrypt)
        return C.enc_init(ctx, NULL, NULL, NULL, nonce) == 1 && C.enc_update(ctx, NULL, &n, aad, 4) == 1 ? 0 : -1;
    return C.dec_init(ctx, NULL, NULL, NULL, nonce) == 1 && C.dec_update(ctx, NULL, &n, aad, 4) == 1 ? 0 : -1;
}

int rgpu_aead_update(struct rgpu_aead *a, const uint8_t *in, size_t len, uint8_t *out)
{
    int (*update)(EVP_CIPHER_CTX *, unsigned char *, int *, const unsigned char *, int) =
        a->encrypt ? C.enc_update : C.dec_update;
    while (len) { /* OpenSSL counts in int; both ciphers are stream ciphers, so every byte in is one out */
        int k = len > (1u << 30) ? 1 << 30 : (int)len, n = 0;
        if (!a->ctx || update(a->ctx, out, &n, in, k) != 1 || n != k)
            return -1;
        in += k;
        out += k;
        len -= (size_t)k;
    }
    return 0;
}

int rgpu_aead_seal_end(struct rgpu_aead *a, uint8_t tag[16])
{
    uint8_t none[16];
    int n = 0;
    return a->ctx && a->encrypt && C.enc_final(a->ctx, none, &n) == 1 && n == 0 &&
                   C.ctx_ctrl(a->ctx, CTRL_AEAD_GET_TAG, 16, tag) == 1
               ? 0
               : -1;
}

int rgpu_aead_open_end(struct rgpu_aead *a, const uint8_t tag[16])
{
    uint8_t none[16], copy[16];
    int n = 0;
    memcpy(copy, tag, 16); /* OpenSSL's SET_TAG takes a non-const pointer */
    return a->ctx && !a->encrypt && C.ctx_ctrl(a->ctx, CTRL_AEAD_SET_TAG, 16, copy) == 1 &&
                   C.dec_final(a->ctx, none, &n) == 1 && n == 0
               ? 0
               : -1;
}

int rgpu_aead_seal(struct rgpu_aead *a, const uint8_t aad[4], const uint8_t *in, size_t len, uint8_t *out)
{
    return rgpu_aead_begin(a, 1, aad) || rgpu_aead_update(a, in, len, out) || rgpu_aead_seal_end(a, out + len)
               ? -1
               : 0;
}

int rgpu_aead_open(struct rgpu_aead *a, const uint8_t aad[4], const uint8_t *in, size_t len, uint8_t *out)
{
    if (len < 16)
        return -1;
    return rgpu_aead_begin(a, 0, aad) || rgpu_aead_update(a, in, len - 16, out) ||
                   rgpu_aead_open_end(a, in + len - 16)
               ? -1
               : 0;
}

/* Test hooks: the handshake derivations and record sealing, compared with tests/vectors/handshake.json. */
__attribute__((visibility("default"))) int rgpu_test_hkdf(const uint8_t *ikm, size_t ikm_len, const uint8_t *salt,
                                                          size_t salt_len, const uint8_t *info, size_t info_len,
                                                          uint8_t *out, size_t out_len)
{
    return rgpu_hkdf_sha256(ikm, ikm_len, salt, salt_len, info, info_len, out, out_len);
}

__attribute__((visibility("default"))) int rgpu_test_hmac(const uint8_t *key, size_t key_len, const uint8_t *data,
                                                          size_t len, uint8_t out[32])
{
    return rgpu_hmac_sha256(key, key_len, data, len, out);
}

__attribute__((visibility("default"))) int rgpu_test_seal(int cipher, const uint8_t key[32], uint64_t counter,
                                                          const uint8_t aad[4], const uint8_t *in, size_t len,
                                                          uint8_t *out)
{
    struct rgpu_aead a = {cipher, {0}, counter, NULL, 0};
    memcpy(a.key, key, 32);
    int r = rgpu_aead_seal(&a, aad, in, len, out);
    rgpu_aead_free(&a);
    return r;
}

__attribute__((visibility("default"))) int rgpu_test_open(int cipher, const uint8_t key[32], uint64_t counter,
                                                          const uint8_t aad[4], const uint8_t *in, size_t len,
                                                          uint8_t *out)
{
    struct rgpu_aead a = {cipher, {0}, counter, NULL, 0};
    memcpy(a.key, key, 32);
    int r = rgpu_aead_open(&a, aad, in, len, out);
    rgpu_aead_free(&a);
    return r;
}
