/* kvqa's attention for one new token over a cache (a decode step): out = softmax(q K^T * scale) V for each query
 * head, its key/value head's keys and values read once for the whole group of query heads that share them. Keys and
 * values float32, bfloat16 or int8 (widened in registers; int8's scales are the caller's: the query
 * times the keys' before, the output times the values' after); the query and everything computed float32. kvqa/native.py
 * builds it for the CPU it runs on (cc -O3 -march=native -fopenmp); kvqa/decode_attention.py calls it.
 *
 * A decode step's attention is memory-bound: every cached key and value is read once for one token. PyTorch's CPU
 * kernel (flash attention) reads them at about half the memory's rate for one query token; this one reads each part
 * of PART keys in one pass over blocks of LANES keys and their values, in memory order: the block's scores (LANES dot
 * products at once, their lanes summed together), their exponentials (vectorised) against the part's running maximum
 * (the sums so far scaled down when it grows, as flash attention does), the values weighted by them. The parts (a
 * key/value head's PART keys each, shared out over the threads) are merged by their maxima and sums, as
 * flash-decoding merges pieces. The parts depend on the number of keys alone, not on the threads, so the same cache
 * and query give the same bits on any thread count. AVX-512 (LANES 16) or AVX2 (8). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define PART 512   /* keys per part */
#define BYTES(held) ((held) == 0 ? 4 : (held) == 1 ? 2 : 1)  /* an element's bytes: float32, bfloat16, int8 */
#define MAX_GROUP 8
#define MAX_DIM 256
#ifndef AHEAD
#define AHEAD 0    /* prefetch the keys and values this many blocks ahead; 0: the CPU's own prefetching */
#endif

#if defined(__AVX512F__)
#define LANES 16
typedef __m512 vec;
static inline vec splat(float x) { return _mm512_set1_ps(x); }
static inline vec load(const float *x) { return _mm512_loadu_ps(x); }
static inline void store(float *x, vec a) { _mm512_storeu_ps(x, a); }
static inline vec add(vec a, vec b) { return _mm512_add_ps(a, b); }
static inline vec mul(vec a, vec b) { return _mm512_mul_ps(a, b); }
static inline vec bigger(vec a, vec b) { return _mm512_max_ps(a, b); }
static inline vec madd(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
static inline vec nmadd(vec a, vec b, vec c) { return _mm512_fnmadd_ps(a, b, c); }
static inline float total(vec a) { return _mm512_reduce_add_ps(a); }
static inline float top_of(vec a) { return _mm512_reduce_max_ps(a); }
/* LANES keys or values from element i on, float32 (held 0), bfloat16 (1; widened: its bits are float32's top half)
 * or int8 (2; converted) */
static inline vec load_row(const void *p, int64_t i, int held) {
    if (held == 1)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i))), 16));
    if (held == 2)
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)((const int8_t *)p + i))));
    return _mm512_loadu_ps((const float *)p + i);
}
static inline vec nearest(vec x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT); }
static inline vec times_two_to(vec p, vec n) { return _mm512_scalef_ps(p, n); }
/* a, with 0 in the lanes where s is -infinity */
static inline vec where_finite(vec a, vec s) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(s, splat(-INFINITY), _CMP_NEQ_OQ), a);
}
/* the sums of LANES vectors' lanes, as one vector: lane i holds the sum of v[i] */
static inline vec sum_lanes(vec v[LANES]) {
    vec a[8], b[4], c[2];
    for (int i = 0; i < 8; i++)  /* per 128-bit block: v[2i]'s lanes 0+2, v[2i+1]'s 0+2, v[2i]'s 1+3, v[2i+1]'s 1+3 */
        a[i] = add(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++)  /* per 128-bit block: the block's sum of v[4i], v[4i+1], v[4i+2], v[4i+3] */
        b[i] = add(_mm512_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                   _mm512_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 2; i++)  /* blocks 0+1 and 2+3 of b[2i], then of b[2i+1] */
        c[i] = add(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                   _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return add(_mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
               _mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
}
#elif defined(__AVX2__) && defined(__FMA__)
#define LANES 8
typedef __m256 vec;
static inline vec splat(float x) { return _mm256_set1_ps(x); }
static inline vec load(const float *x) { return _mm256_loadu_ps(x); }
static inline void store(float *x, vec a) { _mm256_storeu_ps(x, a); }
static inline vec add(vec a, vec b) { return _mm256_add_ps(a, b); }
static inline vec mul(vec a, vec b) { return _mm256_mul_ps(a, b); }
static inline vec bigger(vec a, vec b) { return _mm256_max_ps(a, b); }
static inline vec madd(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
static inline vec nmadd(vec a, vec b, vec c) { return _mm256_fnmadd_ps(a, b, c); }
static inline float total(vec a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
static inline float top_of(vec a) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
static inline vec load_row(const void *p, int64_t i, int held) {
    if (held == 1)
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i))), 16));
    if (held == 2)
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)((const int8_t *)p + i))));
    return _mm256_loadu_ps((const float *)p + i);
}
static inline vec nearest(vec x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vec times_two_to(vec p, vec n) {  /* n >= -126 here: 2^n made in a float's exponent bits */
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}
static inline vec where_finite(vec a, vec s) {
    return _mm256_and_ps(a, _mm256_cmp_ps(s, splat(-INFINITY), _CMP_NEQ_OQ));
}
static inline vec sum_lanes(vec v[LANES]) {
    vec a[4], b[2];
    for (int i = 0; i < 4; i++) a[i] = _mm256_hadd_ps(v[2 * i], v[2 * i + 1]);
    for (int i = 0; i < 2; i++) b[i] = _mm256_hadd_ps(a[2 * i], a[2 * i + 1]);  /* per 128-bit half: 4 vectors' */
    return add(_mm256_permute2f128_ps(b[0], b[1], 0x20), _mm256_permute2f128_ps(b[0], b[1], 0x31));
}
#else
#error "kvqa's decode attention needs AVX2 with FMA, or AVX-512"
#endif

/* e^x for x <= 0 (Cephes' expf: the power of two split off, a degree-7 polynomial on the rest; about 1 ulp) */
static inline vec exp_of(vec x) {
    x = bigger(x, splat(-87.3f));
    vec n = nearest(mul(x, splat(1.44269504088896341f)));
    vec r = nmadd(n, splat(-2.12194440e-4f), nmadd(n, splat(0.693359375f), x));
    vec p = splat(1.9875691500e-4f);
    p = madd(p, r, splat(1.3981999507e-3f));
    p = madd(p, r, splat(8.3334519073e-3f));
    p = madd(p, r, splat(4.1665795894e-2f));
    p = madd(p, r, splat(1.6666665459e-1f));
    p = madd(p, r, splat(5.0000001201e-1f));
    p = madd(p, mul(r, r), add(r, splat(1.0f)));
    return times_two_to(p, n);
}

/* The scores of the g queries for keys j..j+LANES-1 (LANES lanes each, times scale), or for the r < LANES keys
 * left, the lanes after them -infinity. */
static inline __attribute__((always_inline)) void score_block(
    const float *q, const void *k, int64_t j, int64_t r, int g, int d, float scale, int held, vec *s) {
    for (int i = 0; i < g; i++) {
        if (r == LANES) {  /* LANES dot products, their lanes summed together */
            vec acc[LANES];
            for (int t = 0; t < LANES; t++) {
                acc[t] = splat(0.0f);
                for (int e = 0; e < d; e += LANES)
                    acc[t] = madd(load(q + i * d + e), load_row(k, (j + t) * d + e, held), acc[t]);
            }
            s[i] = mul(sum_lanes(acc), splat(scale));
        } else {  /* the last few keys one at a time */
            float lanes[LANES];
            for (int t = 0; t < LANES; t++) lanes[t] = -INFINITY;
            for (int t = 0; t < r; t++) {
                vec acc = splat(0.0f);
                for (int e = 0; e < d; e += LANES)
                    acc = madd(load(q + i * d + e), load_row(k, (j + t) * d + e, held), acc);
                lanes[t] = total(acc) * scale;
            }
            s[i] = load(lanes);
        }
    }
}

/* One part: keys and values from row 0 to n-1 (rows of d), the group's g queries (g x d), in one pass over blocks of
 * LANES keys and their values (flash attention's running maximum: the sums so far scaled down when it grows). Leaves,
 * per query, the scores' maximum m, the sum l of e^(score - m) and the values weighted by those, unnormalised (d), in
 * `partial` (g x (d + 2): m, l, then the d sums). The keys and the values are each read in the order they lie in
 * memory. With AHEAD > 0 (a build flag, -DAHEAD=2: kvqa.model.kernels.decode_attention.prefetch_flags), each block's
 * keys and values AHEAD blocks on are prefetched in software too: on an AMD EPYC that read them slower than the CPU's
 * own prefetching alone (20-22 against 26-31 GB/s, 30 layers' caches at 1,094-7,000 keys), on an Intel Xeon faster
 * where the cache is long (a decode step 9-10% faster at 4,096 and 7,000 tokens, the same at 1,024;
 * docs/performance.md). The same bits either way. */
static inline __attribute__((always_inline)) void attend_part(
    const float *q, const void *k, const void *v, int64_t n, int g, int d, float scale, int held, float *partial) {
    vec acc[MAX_GROUP][MAX_DIM / LANES], sums[MAX_GROUP], s[MAX_GROUP];
    float top[MAX_GROUP], p[MAX_GROUP][LANES];
    for (int i = 0; i < g; i++) {
        top[i] = -INFINITY;
        sums[i] = splat(0.0f);
        for (int c = 0; c < d / LANES; c++) acc[i][c] = splat(0.0f);
    }
    for (int64_t j = 0; j < n; j += LANES) {
#if AHEAD > 0
        const int64_t block = LANES * d * BYTES(held);  /* bytes of a block's keys, or of its values */
        const char *next_keys = (const char *)k + (j / LANES + AHEAD) * block;
        const char *next_values = (const char *)v + (j / LANES + AHEAD) * block;
        for (int64_t b = 0; b < block; b += 64) {  /* a hint: past the end it reads nothing and cannot fault */
            _mm_prefetch(next_keys + b, _MM_HINT_T0);
            _mm_prefetch(next_values + b, _MM_HINT_T0);
        }
#endif
        int64_t r = n - j < LANES ? n - j : LANES;
        score_block(q, k, j, r, g, d, scale, held, s);
        for (int i = 0; i < g; i++) {
            float m = top_of(s[i]);
            if (m > top[i]) {  /* a new maximum: what was summed so far scaled down to it */
                vec shrink = splat(expf(top[i] - m));
                sums[i] = mul(sums[i], shrink);
                for (int c = 0; c < d / LANES; c++) acc[i][c] = mul(acc[i][c], shrink);
                top[i] = m;
            }
            vec e = where_finite(exp_of(add(s[i], splat(-top[i]))), s[i]);  /* -infinity's lanes: 0 */
            sums[i] = add(sums[i], e);
            store(p[i], e);
        }
        for (int64_t t = 0; t < r; t++) {  /* the values, weighted for every query */
            for (int c = 0; c < d / LANES; c++) {
                vec row = load_row(v, (j + t) * d + c * LANES, held);
                for (int i = 0; i < g; i++) acc[i][c] = madd(splat(p[i][t]), row, acc[i][c]);
            }
        }
    }
    for (int i = 0; i < g; i++) {
        partial[i * (d + 2)] = top[i];
        partial[i * (d + 2) + 1] = total(sums[i]);
        for (int c = 0; c < d / LANES; c++) store(partial + i * (d + 2) + 2 + c * LANES, acc[i][c]);
    }
}

static void attend_part_any(const float *q, const void *k, const void *v, int64_t n, int g, int d, float scale,
                            int held, float *partial) {
    /* the shapes of the models kvqa knows, with their loops unrolled; any other through the general loops */
    if (g == 3 && d == 64)
        attend_part(q, k, v, n, 3, 64, scale, held, partial);  /* SmolLM2-135M */
    else if (g == 3 && d == 128)
        attend_part(q, k, v, n, 3, 128, scale, held, partial);  /* Llama 3.2 3B */
    else if (g == 4 && d == 256)
        attend_part(q, k, v, n, 4, 256, scale, held, partial);  /* Gemma 3 270M */
    else if (g == 6 && d == 128)
        attend_part(q, k, v, n, 6, 128, scale, held, partial);  /* Qwen2.5 1.5B */
    else if (g == 7 && d == 64)
        attend_part(q, k, v, n, 7, 64, scale, held, partial);  /* Qwen2.5 0.5B */
    else
        attend_part(q, k, v, n, g, d, scale, held, partial);
}

void kvqa_decode_attention_limits(int *max_group, int *max_dim) {
    *max_group = MAX_GROUP;
    *max_dim = MAX_DIM;
}

int kvqa_decode_attention_lanes(void) { return LANES; }

/* q (kv, g, d) float32; keys and values (kv heads, n rows of d) with `head_stride` elements from one head to the
 * next, float32 (held = 0), bfloat16 (1) or int8 (2); out (kv, g, d) float32. g <= MAX_GROUP, d a multiple of 16 up to MAX_DIM.
 * Returns 0, or -1 where scratch memory could not be had. */
int kvqa_decode_attention(const float *q, const void *k, const void *v, int64_t head_stride, int64_t n, int kv, int g,
                          int d, float scale, int held, float *out, int threads) {
    int64_t parts = (n + PART - 1) / PART, units = kv * parts, size = BYTES(held);
    float *partials = malloc(sizeof(float) * units * g * (d + 2));
    if (partials == NULL) return -1;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t u = 0; u < units; u++) {
        int64_t h = u / parts, start = (u % parts) * PART, end = start + PART < n ? start + PART : n;
        const char *kh = (const char *)k + (h * head_stride + start * d) * size;
        const char *vh = (const char *)v + (h * head_stride + start * d) * size;
        attend_part_any(q + h * g * d, kh, vh, end - start, g, d, scale, held, partials + u * g * (d + 2));
    }
    for (int64_t h = 0; h < kv; h++)  /* the parts merged: each weighted by e^(its maximum - the overall one) */
        for (int i = 0; i < g; i++) {
            float top = -INFINITY, total = 0.0f, *o = out + (h * g + i) * d;
            for (int64_t p = 0; p < parts; p++) top = fmaxf(top, partials[((h * parts + p) * g + i) * (d + 2)]);
            for (int e = 0; e < d; e++) o[e] = 0.0f;
            for (int64_t p = 0; p < parts; p++) {
                const float *part = partials + ((h * parts + p) * g + i) * (d + 2);
                float w = expf(part[0] - top);
                total += part[1] * w;
                for (int e = 0; e < d; e++) o[e] += part[2 + e] * w;
            }
            for (int e = 0; e < d; e++) o[e] /= total;
        }
    free(partials);
    return 0;
}
