/* Coded copies (copy_runs.h). The encoder reads each word about once: a run found is extended eight words at a
 * time, and a position that starts no run costs a subtraction and a comparison. */
#include <endian.h>
#include <string.h>
/* (RGPU_RUNS_PLAIN: the plain loops only, as on a CPU without AVX2 -- tests/test_coded_copies.py checks both) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(RGPU_RUNS_PLAIN)
#define RUNS_AVX2 1
#include <immintrin.h>
#endif

#include "copy_runs.h"
#include "rgpu_consts.h"
#include "rgpu_wire.h"

#define SEGMENT 8 /* literal:u32 run:u32 */
#define RUN 16    /* first:u64 step:u64 */
#define FIRST_LOOK 2048 /* words (16 KiB) read before the first "does it code?" look */

/* (rgpu_get_u64 and rgpu_put_u64 go a byte at a time, which decoding a long run felt: these are one load or store) */
static inline uint64_t word(const uint8_t *src, size_t i)
{
    uint64_t v;
    memcpy(&v, src + 8 * i, 8);
    return le64toh(v);
}

static inline void put_word(uint8_t *p, uint64_t v)
{
    v = htole64(v);
    memcpy(p, &v, 8);
}

/* The first j >= from at which word j - word j-1 is not step (or words). Where no run starts, the first look
 * says so: eight words at a time only once a run is under way. */
static inline __attribute__((always_inline)) size_t run_end_body(const uint8_t *src, size_t from, size_t words,
                                                                 uint64_t step)
{
    size_t j = from;
    for (size_t stop = from + 8 < words ? from + 8 : words; j < stop; j++)
        if (word(src, j) - word(src, j - 1) != step)
            return j;
    uint64_t ahead[8]; /* (each word against the one before the block: the eight compare independently) */
    for (size_t k = 0; k < 8; k++)
        ahead[k] = (k + 1) * step;
    while (words - j >= 8) {
        uint64_t before = word(src, j - 1), off = 0;
        for (size_t k = 0; k < 8; k++)
            off |= word(src, j + k) ^ (before + ahead[k]);
        if (off)
            break;
        j += 8;
    }
    while (j < words && word(src, j) - word(src, j - 1) == step)
        j++;
    return j;
}

/* A run's words written out, four independent sums at a time. */
static void fill_body(uint8_t *p, size_t run, uint64_t v, uint64_t step)
{
    size_t k = 0;
    for (uint64_t v1 = v + step, v2 = v1 + step, v3 = v2 + step, by4 = 4 * step; run - k >= 4; k += 4) {
        put_word(p + 8 * k, v), put_word(p + 8 * k + 8, v1), put_word(p + 8 * k + 16, v2);
        put_word(p + 8 * k + 24, v3);
        v += by4, v1 += by4, v2 += by4, v3 += by4;
    }
    for (; k < run; k++, v += step)
        put_word(p + 8 * k, v);
}

/* Both loops four words a vector where the CPU has AVX2 (the box's and the CPU machine's do): coding and decoding
 * take less of the time the copy saves (bench/copy_runs_bench.c; bench/results/cpu-2026-12-05b-coded). */
#ifdef RUNS_AVX2
__attribute__((target("avx2"))) static size_t run_end_avx2(const uint8_t *src, size_t from, size_t words, uint64_t step)
{
    return run_end_body(src, from, words, step);
}

__attribute__((target("avx2"))) static void fill_avx2(uint8_t *p, size_t run, uint64_t v, uint64_t step)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    __m256i four = _mm256_set_epi64x((long long)(v + 3 * step), (long long)(v + 2 * step), (long long)(v + step),
                                     (long long)v),
            by4 = _mm256_set1_epi64x((long long)(4 * step));
    size_t k = 0;
    for (; run - k >= 4; k += 4, four = _mm256_add_epi64(four, by4))
        _mm256_storeu_si256((__m256i *)(p + 8 * k), four);
    fill_body(p + 8 * k, run - k, v + k * step, step);
#else
    fill_body(p, run, v, step);
#endif
}

static int avx2(void)
{
    static int has = -1;
    int v = __atomic_load_n(&has, __ATOMIC_RELAXED);
    if (v < 0) {
        v = __builtin_cpu_supports("avx2") ? 1 : 0;
        __atomic_store_n(&has, v, __ATOMIC_RELAXED);
    }
    return v;
}
#else
#define avx2() 0
#define run_end_avx2 run_end_body
#define fill_avx2 fill_body
#endif

static size_t run_end(const uint8_t *src, size_t from, size_t words, uint64_t step)
{
    return avx2() ? run_end_avx2(src, from, words, step) : run_end_body(src, from, words, step);
}

static void fill(uint8_t *p, size_t run, uint64_t v, uint64_t step)
{
    if (avx2())
        fill_avx2(p, run, v, step);
    else
        fill_body(p, run, v, step);
}

/* One segment: the literal words src[lit_from, run_from), then run_to - run_from words of the run (none when
 * equal). 0, or -1 where it does not fit in out[*at, cap). */
static int put_segment(const uint8_t *src, size_t lit_from, size_t run_from, size_t run_to, uint8_t *out,
                       size_t *at, size_t cap)
{
    size_t literal = run_from - lit_from, need = SEGMENT + literal * 8 + (run_to > run_from ? RUN : 0);
    if (need > cap - *at)
        return -1;
    uint8_t *p = out + *at;
    rgpu_put_u32(p, literal);
    rgpu_put_u32(p + 4, run_to - run_from);
    memcpy(p + SEGMENT, src + 8 * lit_from, literal * 8);
    if (run_to > run_from) {
        uint64_t first = word(src, run_from);
        rgpu_put_u64(p + SEGMENT + literal * 8, first);
        rgpu_put_u64(p + SEGMENT + literal * 8 + 8, word(src, run_from + 1) - first);
    }
    *at += need;
    return 0;
}

size_t rgpu_runs_encode(const uint8_t *src, size_t n, uint8_t *out, size_t cap)
{
    size_t words = n / 8, tail = n % 8, at = 0, lit_from = 0, literal = 0, i = 0, look = FIRST_LOOK;
    if (n > RGPU_RUNS_MAX_COPY_BYTES || cap < tail)
        return 0;
    cap -= tail;
    while (words - i >= RGPU_RUNS_MIN_RUN) {
        uint64_t step = word(src, i + 1) - word(src, i);
        size_t j = run_end(src, i + 2, words, step);
        if (j - i >= RGPU_RUNS_MIN_RUN) {
            literal += i - lit_from;
            if (put_segment(src, lit_from, i, j, out, &at, cap))
                return 0;
            i = lit_from = j;
        } else {
            i++;
        }
        if (i >= look) { /* (literal words, those written and those waiting, against what was read) */
            if (2 * (literal + i - lit_from) > i)
                return 0;
            look *= 2;
        }
        if (8 * (literal + i - lit_from) > cap)
            return 0;
    }
    if (lit_from < words && put_segment(src, lit_from, words, words, out, &at, cap))
        return 0;
    memcpy(out + at, src + 8 * words, tail);
    return at + tail;
}

/* One segment of a coding, as walk hands it on. */
struct segment {
    size_t done;             /* words before this segment */
    size_t literal, run;     /* words of each */
    const uint8_t *literals; /* literal * 8 bytes */
    uint64_t first, step;    /* the run's */
};

/* The segments of coded[0, len) standing for n bytes, each checked against what is left on both sides before
 * `each` sees it; 0, or -1 where the coding does not stand for exactly n bytes (or `each` refused). Decoding and
 * planning a device fill walk the same way, so that what one accepts the other does. (Inlined into each caller:
 * through the function pointer, decoding a mask took 8-12x as long; bench/copy_runs_bench.c.) */
static inline __attribute__((always_inline)) int walk(const uint8_t *coded, size_t len, size_t n,
                                                     int (*each)(const struct segment *, void *), void *arg)
{
    size_t words = n / 8, tail = n % 8, done = 0, at = 0;
    if (!n || n > RGPU_RUNS_MAX_COPY_BYTES || len > RGPU_RUNS_MAX_CODED_BYTES || len < tail)
        return -1;
    size_t body = len - tail;
    while (done < words) {
        if (body - at < SEGMENT)
            return -1;
        struct segment s = {done, rgpu_get_u32(coded + at), rgpu_get_u32(coded + at + 4), NULL, 0, 0};
        at += SEGMENT;
        if ((!s.literal && !s.run) || s.literal > words - done || s.literal > (body - at) / 8)
            return -1;
        s.literals = coded + at;
        at += s.literal * 8, done += s.literal;
        if (s.run) {
            if (s.run > words - done || body - at < RUN)
                return -1;
            s.first = word(coded + at, 0), s.step = word(coded + at, 1);
            at += RUN;
            done += s.run;
        }
        if (each(&s, arg))
            return -1;
    }
    return at == body ? 0 : -1;
}

static int decode_segment(const struct segment *s, void *out)
{
    uint8_t *p = (uint8_t *)out + 8 * s->done;
    memcpy(p, s->literals, s->literal * 8);
    if (s->run)
        fill(p + 8 * s->literal, s->run, s->first, s->step);
    return 0;
}

int rgpu_runs_decode(const uint8_t *coded, size_t len, uint8_t *out, size_t n)
{
    if (walk(coded, len, n, decode_segment, out))
        return -1;
    memcpy(out + n - n % 8, coded + len - n % 8, n % 8);
    return 0;
}

/* -- a device fill's plan (copy_runs.h) ------------------------------------------------------------------------ */
struct plan {
    size_t entries, literal_words; /* counted; then, writing, those placed so far */
    uint8_t *out;                  /* NULL while counting */
    size_t literals_at, cap;       /* where in out the literal words go (after the entries), and out's size */
};

static void put_entry(struct plan *p, uint64_t first, uint64_t step, uint64_t source, size_t word, size_t words)
{
    uint8_t *e = p->out + RGPU_RUNS_FILL_ENTRY * p->entries;
    put_word(e, first), put_word(e + 8, step), put_word(e + 16, source);
    put_word(e + 24, (uint64_t)(uint32_t)word | (uint64_t)(uint32_t)words << 32); /* (word:u32 words:u32, LE) */
}

/* A segment's literal words, then its run, each cut into entries of at most RGPU_RUNS_FILL_WORDS words. */
static int plan_segment(const struct segment *s, void *arg)
{
    struct plan *p = arg;
    /* (writing, a segment must fit what counting found: checked first, whatever the caller passed) */
    size_t entries = (s->literal + RGPU_RUNS_FILL_WORDS - 1) / RGPU_RUNS_FILL_WORDS +
                     (s->run + RGPU_RUNS_FILL_WORDS - 1) / RGPU_RUNS_FILL_WORDS;
    if (p->out && (entries > p->literals_at / RGPU_RUNS_FILL_ENTRY - p->entries ||
                   s->literal > (p->cap - p->literals_at) / 8 - p->literal_words))
        return -1;
    for (size_t k = 0; k < s->literal; k += RGPU_RUNS_FILL_WORDS) {
        size_t words = s->literal - k < RGPU_RUNS_FILL_WORDS ? s->literal - k : RGPU_RUNS_FILL_WORDS;
        if (p->out) {
            uint8_t *at = p->out + p->literals_at + 8 * p->literal_words;
            memcpy(at, s->literals + 8 * k, 8 * words);
            put_entry(p, 0, 0, (uint64_t)(uintptr_t)at, s->done + k, words);
        }
        p->entries++, p->literal_words += words;
    }
    for (size_t k = 0; k < s->run; k += RGPU_RUNS_FILL_WORDS) {
        size_t words = s->run - k < RGPU_RUNS_FILL_WORDS ? s->run - k : RGPU_RUNS_FILL_WORDS;
        if (p->out)
            put_entry(p, s->first + k * s->step, s->step, 0, s->done + s->literal + k, words);
        p->entries++;
    }
    return 0;
}

_Static_assert(RGPU_RUNS_MAX_COPY_BYTES / 8 <= UINT32_MAX, "a plan's word fields are u32");

int rgpu_runs_plan_size(const uint8_t *coded, size_t len, size_t n, size_t *entries, size_t *bytes)
{
    struct plan p = {0, 0, NULL, 0, 0};
    if (n % 8 || walk(coded, len, n, plan_segment, &p))
        return -1;
    *entries = p.entries;
    *bytes = p.entries * RGPU_RUNS_FILL_ENTRY + p.literal_words * 8;
    return 0;
}

int rgpu_runs_plan(const uint8_t *coded, size_t len, size_t n, uint8_t *out, size_t entries, size_t bytes)
{
    if (entries > bytes / RGPU_RUNS_FILL_ENTRY)
        return -1;
    struct plan p = {0, 0, out, entries * RGPU_RUNS_FILL_ENTRY, bytes};
    if (n % 8 || walk(coded, len, n, plan_segment, &p) || p.entries != entries ||
        p.literals_at + 8 * p.literal_words != bytes)
        return -1;
    return 0;
}
