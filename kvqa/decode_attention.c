/* kvqa's attention for one new token over a cache (a decode step): out = softmax(q K^T * scale) V for each query
 * head, its key/value head's keys and values read once for the whole group of query heads that share them. Keys and
 * values float32 or bfloat16 (widened in registers); the query and everything computed float32. kvqa/native.py
 * builds it for the CPU it runs on (cc -O3 -march=native -fopenmp); kvqa/decode_attention.py calls it.
 *
 * A decode step's attention is memory-bound: every cached key and value is read once for one token. PyTorch's CPU
 * kernel (flash attention) reads them at about half the memory's rate for one query token; this one reads each part
 * of PART keys in one pass over blocks of 16 keys and their values, prefetched ahead: the block's scores (16 dot
 * products at once, their lanes summed together), their exponentials (vectorised) against the part's running maximum
 * (the sums so far scaled down when it grows, as flash attention does), the values weighted by them. The parts (a
 * key/value head's PART keys each, shared out over the threads) are merged by their maxima and sums, as
 * flash-decoding merges pieces. The parts depend on the number of keys alone, not on the threads, so the same cache
 * and query give the same bits on any thread count.
 * AVX-512 only (kvqa/decode_attention.py runs PyTorch's SDPA elsewhere). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define PART 512   /* keys per part */
#define MAX_GROUP 8
#define MAX_DIM 256
#define AHEAD 2    /* prefetch the keys and values this many blocks of 16 ahead */

#if !defined(__AVX512F__)
#error "kvqa's decode attention needs AVX-512"
#endif

/* 16 keys or values from row `row` on, float32 or bfloat16 (bfloat16 widened: its bits are float32's top half) */
static inline __m512 load16(const void *p, int64_t i, int bf16) {
    if (bf16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i))), 16));
    return _mm512_loadu_ps((const float *)p + i);
}

/* e^x for x <= 0 (Cephes' expf: the power of two split off, a degree-7 polynomial on the rest; about 1 ulp) */
static inline __m512 exp16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* the sums of 16 vectors' lanes, as one vector: lane i holds the sum of v[i] */
static inline __m512 sum16(__m512 v[16]) {
    __m512 a[8], b[4], c[2];
    for (int i = 0; i < 8; i++)  /* per 128-bit block: v[2i]'s lanes 0+2, v[2i+1]'s 0+2, v[2i]'s 1+3, v[2i+1]'s 1+3 */
        a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++)  /* per 128-bit block: the block's sum of v[4i], v[4i+1], v[4i+2], v[4i+3] */
        b[i] = _mm512_add_ps(_mm512_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(a[2 * i], a[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 2; i++)  /* blocks 0+1 and 2+3 of b[2i], then of b[2i+1] */
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(c[0], c[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* The scores of the g queries for keys j..j+15 (16 lanes each, times scale), or for the r < 16 keys left, the lanes
 * after them -infinity. */
static inline __attribute__((always_inline)) void score16(
    const float *q, const void *k, int64_t j, int64_t r, int g, int d, float scale, int bf16, __m512 *s) {
    for (int i = 0; i < g; i++) {
        if (r == 16) {  /* 16 dot products, their lanes summed together */
            __m512 acc[16];
            for (int t = 0; t < 16; t++) {
                acc[t] = _mm512_setzero_ps();
                for (int e = 0; e < d; e += 16)
                    acc[t] = _mm512_fmadd_ps(_mm512_loadu_ps(q + i * d + e), load16(k, (j + t) * d + e, bf16), acc[t]);
            }
            s[i] = _mm512_mul_ps(sum16(acc), _mm512_set1_ps(scale));
        } else {  /* the last few keys one at a time */
            float lanes[16];
            for (int t = 0; t < 16; t++) lanes[t] = -INFINITY;
            for (int t = 0; t < r; t++) {
                __m512 acc = _mm512_setzero_ps();
                for (int e = 0; e < d; e += 16)
                    acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i * d + e), load16(k, (j + t) * d + e, bf16), acc);
                lanes[t] = _mm512_reduce_add_ps(acc) * scale;
            }
            s[i] = _mm512_loadu_ps(lanes);
        }
    }
}

/* One part: keys and values from row 0 to n-1 (rows of d), the group's g queries (g x d), in one pass over blocks of
 * 16 keys and their values (flash attention's running maximum: the sums so far scaled down when it grows). Leaves,
 * per query, the scores' maximum m, the sum l of e^(score - m) and the values weighted by those, unnormalised (d), in
 * `partial` (g x (d + 2): m, l, then the d sums). The keys and values are prefetched AHEAD blocks ahead. */
static inline __attribute__((always_inline)) void attend_part(
    const float *q, const void *k, const void *v, int64_t n, int g, int d, float scale, int bf16, float *partial) {
    const int64_t block = 16 * d * (bf16 ? 2 : 4);  /* bytes of 16 keys, or of 16 values */
    __m512 acc[MAX_GROUP][MAX_DIM / 16], sums[MAX_GROUP], s[MAX_GROUP];
    float top[MAX_GROUP], p[MAX_GROUP][16];
    for (int i = 0; i < g; i++) {
        top[i] = -INFINITY;
        sums[i] = _mm512_setzero_ps();
        for (int c = 0; c < d / 16; c++) acc[i][c] = _mm512_setzero_ps();
    }
    for (int64_t j = 0; j < n; j += 16) {
        const char *next_keys = (const char *)k + (j / 16 + AHEAD) * block;
        const char *next_values = (const char *)v + (j / 16 + AHEAD) * block;
        for (int64_t b = 0; b < block; b += 64) {
            _mm_prefetch(next_keys + b, _MM_HINT_T0);
            _mm_prefetch(next_values + b, _MM_HINT_T0);
        }
        int64_t r = n - j < 16 ? n - j : 16;
        score16(q, k, j, r, g, d, scale, bf16, s);
        for (int i = 0; i < g; i++) {
            float m = _mm512_reduce_max_ps(s[i]);
            if (m > top[i]) {  /* a new maximum: what was summed so far scaled down to it */
                __m512 shrink = _mm512_set1_ps(expf(top[i] - m));
                sums[i] = _mm512_mul_ps(sums[i], shrink);
                for (int c = 0; c < d / 16; c++) acc[i][c] = _mm512_mul_ps(acc[i][c], shrink);
                top[i] = m;
            }
            __m512 e = exp16(_mm512_sub_ps(s[i], _mm512_set1_ps(top[i])));  /* -infinity's lanes: 0 */
            e = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(s[i], _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ), e);
            sums[i] = _mm512_add_ps(sums[i], e);
            _mm512_storeu_ps(p[i], e);
        }
        for (int64_t t = 0; t < r; t++) {  /* the values, weighted for every query */
            for (int c = 0; c < d / 16; c++) {
                __m512 row = load16(v, (j + t) * d + c * 16, bf16);
                for (int i = 0; i < g; i++) acc[i][c] = _mm512_fmadd_ps(_mm512_set1_ps(p[i][t]), row, acc[i][c]);
            }
        }
    }
    for (int i = 0; i < g; i++) {
        partial[i * (d + 2)] = top[i];
        partial[i * (d + 2) + 1] = _mm512_reduce_add_ps(sums[i]);
        for (int c = 0; c < d / 16; c++) _mm512_storeu_ps(partial + i * (d + 2) + 2 + c * 16, acc[i][c]);
    }
}

static void attend_part_any(const float *q, const void *k, const void *v, int64_t n, int g, int d, float scale,
                            int bf16, float *partial) {
    /* the shapes of the models kvqa knows, with their loops unrolled; any other through the general loops */
    if (g == 3 && d == 64)
        attend_part(q, k, v, n, 3, 64, scale, bf16, partial);  /* SmolLM2-135M */
    else if (g == 3 && d == 128)
        attend_part(q, k, v, n, 3, 128, scale, bf16, partial);  /* Llama 3.2 3B */
    else if (g == 4 && d == 256)
        attend_part(q, k, v, n, 4, 256, scale, bf16, partial);  /* Gemma 3 270M */
    else
        attend_part(q, k, v, n, g, d, scale, bf16, partial);
}

int kvqa_decode_attention_limits(int *max_group, int *max_dim) {
    *max_group = MAX_GROUP;
    *max_dim = MAX_DIM;
    return PART;
}

/* q (kv, g, d) float32; keys and values (kv heads, n rows of d) with `head_stride` elements from one head to the
 * next, float32 or bfloat16 (bf16 = 1); out (kv, g, d) float32. g <= MAX_GROUP, d a multiple of 16 up to MAX_DIM.
 * Returns 0, or -1 where scratch memory could not be had. */
int kvqa_decode_attention(const float *q, const void *k, const void *v, int64_t head_stride, int64_t n, int kv, int g,
                          int d, float scale, int bf16, float *out, int threads) {
    int64_t parts = (n + PART - 1) / PART, units = kv * parts, size = bf16 ? 2 : 4;
    float *partials = malloc(sizeof(float) * units * g * (d + 2));
    if (partials == NULL) return -1;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t u = 0; u < units; u++) {
        int64_t h = u / parts, start = (u % parts) * PART, end = start + PART < n ? start + PART : n;
        const char *kh = (const char *)k + (h * head_stride + start * d) * size;
        const char *vh = (const char *)v + (h * head_stride + start * d) * size;
        attend_part_any(q + h * g * d, kh, vh, end - start, g, d, scale, bf16, partials + u * g * (d + 2));
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
