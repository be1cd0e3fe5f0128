/* The pre-shared key and the PSK half of the handshake (docs/protocol.md, "Authentication"). */
#define _GNU_SOURCE /* statx */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "conn.h"

/* As rgpu.config.load_psk: a file that group or others may read or write is refused, unless
 * RGPU_ALLOW_READABLE_PSK is set (then it is used, and warned about). */
static int readable_allowed(const char *path, unsigned mode)
{
    const char *allow = getenv("RGPU_ALLOW_READABLE_PSK");
    int allowed = allow && *allow && strcmp(allow, "0");
    if (allowed)
        rgpu_log(RGPU_LOG_WARN, "PSK file %s can be read by other users (mode %04o), so anyone who reads it can use "
                                "the server or pose as it: used anyway, as asked; run: chmod 600 %s", path, mode, path);
    else
        rgpu_log(RGPU_LOG_ERROR, "PSK file %s can be read by other users (mode %04o), so anyone who reads it can use "
                                 "the server or pose as it: refusing it; run: chmod 600 %s (to use it anyway: "
                                 "--allow-readable-psk or RGPU_ALLOW_READABLE_PSK=1)", path, mode, path);
    return allowed;
}

/* statx where the headers have it (glibc >= 2.28): fstat became a libc symbol only in glibc 2.33, so a stand-in
 * built on a newer glibc that used it would not load on older ones (src/glibc_compat.h). */
static int file_mode(FILE *f, unsigned *mode)
{
#ifdef STATX_MODE
    struct statx st;
    if (statx(fileno(f), "", AT_EMPTY_PATH, STATX_MODE, &st))
        return -1;
    *mode = st.stx_mode;
#else
    struct stat st;
    if (fstat(fileno(f), &st))
        return -1;
    *mode = st.st_mode;
#endif
    return 0;
}

int conn_load_psk(const char *path, uint8_t *key, size_t *key_len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    unsigned mode;
    if (file_mode(f, &mode) || ((mode & 077) && !readable_allowed(path, mode & 07777))) {
        fclose(f);
        return -3;
    }
    uint8_t raw[1024];
    size_t n = fread(raw, 1, sizeof raw, f);
    fclose(f);
    size_t a = 0, b = n;
    while (a < b && (raw[a] == ' ' || raw[a] == '\n' || raw[a] == '\r' || raw[a] == '\t')) a++;
    while (b > a && (raw[b - 1] == ' ' || raw[b - 1] == '\n' || raw[b - 1] == '\r' || raw[b - 1] == '\t')) b--;
    int hex = (b - a) % 2 == 0 && b > a;
    for (size_t i = a; i < b && hex; i++)
        hex = (raw[i] >= '0' && raw[i] <= '9') || ((raw[i] | 32) >= 'a' && (raw[i] | 32) <= 'f');
    if (hex) {
        *key_len = (b - a) / 2;
        for (size_t i = 0; i < *key_len; i++) {
            unsigned v;
            sscanf((const char *)raw + a + 2 * i, "%2x", &v);
            key[i] = (uint8_t)v;
        }
    } else {
        memcpy(key, raw, n);
        *key_len = n;
    }
    return *key_len >= 32 ? 0 : -2;
}

static int ct_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint8_t d = 0;
    for (size_t i = 0; i < n; i++)
        d |= a[i] ^ b[i];
    return d == 0;
}

/* SHA-256 over the transcript label and both HELLOs' args and bulk, each length-prefixed. */
static int transcript(const uint8_t *cargs, const uint8_t *cbulk, size_t cbulk_len, const uint8_t *sargs,
                      const uint8_t *sbulk, size_t sbulk_len, uint8_t th[32])
{
    static const char label[] = "rgpu-v1 transcript";
    uint8_t buf[18 + 4 * 4 + 2 * RGPU_HELLO_REQ_SIZE + 2 * 256];
    size_t n = 0;
    if (cbulk_len > 256 || sbulk_len > 256)
        return -1;
    memcpy(buf, label, 18);
    n = 18;
    const uint8_t *parts[4] = {cargs, cbulk, sargs, sbulk};
    size_t lens[4] = {RGPU_HELLO_REQ_SIZE, cbulk_len, RGPU_HELLO_REQ_SIZE, sbulk_len};
    for (int i = 0; i < 4; i++) {
        rgpu_put_u32(buf + n, lens[i]);
        memcpy(buf + n + 4, parts[i], lens[i]);
        n += 4 + lens[i];
    }
    return rgpu_sha256(buf, n, th);
}

CUresult conn_authenticate(const uint8_t *psk, size_t psk_len, const struct conn_hellos *t)
{
    int cipher = (int)t->rep->ciphers;
    if (cipher != RGPU_CIPHER_AES_256_GCM && cipher != RGPU_CIPHER_CHACHA20_POLY1305)
        return CUDA_ERROR_NOT_INITIALIZED;
    uint8_t th[32], proof[32], sproof[32], info[12 + 32], salt[64], keys[64], buf[20 + 32];
    if (transcript(t->client, t->client_agent, t->client_agent_len, t->server, t->server_agent,
                   t->server_agent_len, th))
        return CUDA_ERROR_NOT_INITIALIZED;
    memcpy(buf, "rgpu-v1 client proof", 20);
    memcpy(buf + 20, th, 32);
    rgpu_hmac_sha256(psk, psk_len, buf, 52, proof);
    struct rgpu_auth_req mine;
    memcpy(mine.proof, proof, sizeof proof);
    uint8_t args[RGPU_AUTH_REQ_SIZE], theirs[RGPU_AUTH_REP_SIZE];
    rgpu_pack_auth(args, &mine);
    struct out_frame a = {{RGPU_OP_AUTH, 0, rgpu_conn.next_id++, 0, 0, 0}, args, sizeof args, NULL};
    rgpu_header h;
    struct rgpu_auth_rep rep;
    if (conn_send_frames(&a, 1) || conn_recv_reply(&h, theirs, sizeof theirs, NULL))
        return CUDA_ERROR_NOT_INITIALIZED;
    if (h.status) {
        rgpu_log(RGPU_LOG_ERROR, "authentication failed: %s", h.status == RGPU_STATUS_AUTH_FAILED ? "wrong key"
                                                                                      : rgpu_conn.message);
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    rgpu_unpack_auth(theirs, sizeof theirs, &rep);
    memcpy(sproof, rep.proof, sizeof sproof);
    memcpy(buf, "rgpu-v1 server proof", 20);
    rgpu_hmac_sha256(psk, psk_len, buf, 52, proof);
    if (!ct_equal(proof, sproof, 32)) {
        rgpu_log(RGPU_LOG_ERROR, "authentication failed: the server does not hold our key");
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    memcpy(info, "rgpu-v1 keys", 12);
    memcpy(info + 12, th, 32);
    memcpy(salt, t->req->nonce, 32);
    memcpy(salt + 32, t->rep->nonce, 32);
    if (rgpu_hkdf_sha256(psk, psk_len, salt, 64, info, sizeof info, keys, 64))
        return CUDA_ERROR_NOT_INITIALIZED;
    rgpu_conn.tx = (struct rgpu_aead){cipher, {0}, 0};
    rgpu_conn.rx = (struct rgpu_aead){cipher, {0}, 0};
    memcpy(rgpu_conn.tx.key, keys, 32);
    memcpy(rgpu_conn.rx.key, keys + 32, 32);
    rgpu_conn.protect = 1;
    memset(keys, 0, sizeof keys);
    return CUDA_SUCCESS;
}
