/* One layer of a Llama-family decode step with int8 weights, in two calls around the MLP's activation: the written-out
 * step (kvqa/model/architectures/llama.py) otherwise runs some 80 PyTorch operations a layer between its kernels, a few
 * milliseconds a token on 2 cores. kvqa/model/kernels/llama_layer.py builds it for the CPU it runs on and calls it
 * through ctypes.
 *
 * The products, the norms and the attention are not computed here: they are kvqa's own kernels (int8_matmul.c, the
 * 4-bit int4_matmul.c for a layer that has that form, rms_norm.c, decode_attention.c), called through the addresses of
 * the very functions the model's forward calls, so their bits are the forward's. A projection's bias (Qwen2's q, k
 * and v) is added after its product, one float32 sum an element, as the forward's `y + bias`.
 * What this file computes itself is what PyTorch computed between them, operation by operation in the same roundings:
 * the rotation q * cos + roll(q, D / 2) * sin (two products, then their sum: built with -ffp-contract=off, so no fused
 * multiply-add merges them), the keys and values written into the cache (float32, bfloat16 rounded to nearest even
 * as PyTorch rounds, or int8: divided by their channel's scale and rounded to nearest even, as kvqa.model.kv_cache's
 * to_int8), an int8 cache's query times the keys' scales and output times the values' (as _BufferLayer.attend), the
 * residual sums. The activation (silu(gate) * up) stays PyTorch's, between the two calls. */
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef void (*matmul_fn)(const float *x, const int8_t *w, const uint16_t *scale, float *y, int64_t M, int64_t N,
                          int64_t K, int64_t G, int threads);
typedef void (*int4_fn)(const float *x, const uint8_t *nibbles, const uint16_t *scale, const uint16_t *min,
                        float *y, int64_t M, int64_t N, int64_t K, int threads);
typedef void (*norm_fn)(const float *x, const float *weight, float *out, int64_t M, int64_t K, float eps,
                        int threads);
typedef int (*attention_fn)(const float *query, const void *keys, const void *values, int64_t head_stride,
                            int64_t S, int kv, int group, int D, float scale, int held, float *out, int threads);

struct matrix {  /* int8 rows (n, k) times bfloat16 scales, one per run of `run` weights of a row */
    const int8_t *rows;
    const uint16_t *scales;
    int64_t n, k, run;
    const float *bias;  /* (n,) float32, or NULL */
    const uint8_t *nibbles;  /* the 4-bit form (n, k / 2), with float16 scales and mins per 32 weights; NULL: none */
    const uint16_t *scales4, *mins4;
};

struct layer {
    const float *in_norm, *post_norm;
    float in_eps, post_eps;
    struct matrix qkv, o, gate_up, down;
};

struct model {
    int64_t hidden, heads, kv_heads, dim, inter;
    float scaling;
    int held;  /* what the cache holds: float32 (0), bfloat16 (1), int8 with a scale per channel (2) */
    matmul_fn matmul;
    int4_fn int4;  /* NULL where no layer has a 4-bit form */
    norm_fn norm;
    attention_fn attend;
    const struct layer *layers;
};

/* The scratch a step works in, one float32 array: x (hidden) | h (hidden) | qkv ((H + 2 KV) D) | attention's output
 * (H D) | gate|up (2 I) | the activation (I). llama_layer.py views the same offsets. */
#define X(m) 0
#define H(m) ((m)->hidden)
#define QKV(m) (2 * (m)->hidden)
#define OUT(m) (QKV(m) + ((m)->heads + 2 * (m)->kv_heads) * (m)->dim)
#define GATE_UP(m) (OUT(m) + (m)->heads * (m)->dim)
#define ACT(m) (GATE_UP(m) + 2 * (m)->inter)

int64_t kvqa_llama_scratch(const struct model *m) { return ACT(m) + m->inter; }

static void product(const struct model *m, const struct matrix *w, const float *x, float *y, int threads) {
    if (w->nibbles)
        m->int4(x, w->nibbles, w->scales4, w->mins4, y, 1, w->n, w->k, threads);
    else
        m->matmul(x, w->rows, w->scales, y, 1, w->n, w->k, w->run, threads);
    if (w->bias)
        for (int64_t i = 0; i < w->n; i++) y[i] = y[i] + w->bias[i];
}

static int8_t to_int8(float f, float scale) {  /* f / scale rounded to nearest even, clamped to +-127 */
    float q = nearbyintf(f / scale);
    return (int8_t)(q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q);
}

static uint16_t to_bfloat16(float f) {  /* round to nearest even, as PyTorch's conversion (NaN: its quiet NaN) */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if (f != f) return 0x7fc0;
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* heads rows of D, each rotated in place: t * cos + roll(t, D / 2) * sin (sin's first half negated by the caller) */
static void rotate(float *t, int64_t heads, int64_t D, const float *cos, const float *sin) {
    float row[1024];
    int64_t half = D / 2;
    for (int64_t h = 0; h < heads; h++, t += D) {
        memcpy(row, t, D * sizeof(float));
        for (int64_t i = 0; i < D; i++) {
            float a = row[i] * cos[i];
            float b = row[(i + half) % D] * sin[i];
            t[i] = a + b;
        }
    }
}

/* The layer's attention half: x += o(attention(rotated q, the cache with this token's k and v)); then
 * gate|up = gate_up(post_norm(x)) for the caller's activation. keys and values: the layer's cache buffers,
 * (KV, capacity, D), head_stride elements between heads, with an int8 cache's scales (KV, D) for each (else NULL);
 * the token goes at `position`. Returns non-zero where the attention could not allocate its scratch. */
int kvqa_llama_attention(const struct model *m, int64_t index, float *scratch, int64_t position, const float *cos,
                         const float *sin, void *keys, void *values, int64_t head_stride, const float *key_scales,
                         const float *value_scales, int threads) {
    const struct layer *l = &m->layers[index];
    int64_t D = m->dim, KV = m->kv_heads, Hq = m->heads;
    float *x = scratch + X(m), *h = scratch + H(m), *qkv = scratch + QKV(m), *out = scratch + OUT(m);
    m->norm(x, l->in_norm, h, 1, m->hidden, l->in_eps, threads);
    product(m, &l->qkv, h, qkv, threads);
    rotate(qkv, Hq + KV, D, cos, sin);
    const float *k = qkv + Hq * D, *v = k + KV * D;
    for (int64_t j = 0; j < KV; j++) {
        int64_t at = j * head_stride + position * D;
        if (m->held == 2) {
            for (int64_t i = 0; i < D; i++) {
                ((int8_t *)keys)[at + i] = to_int8(k[j * D + i], key_scales[j * D + i]);
                ((int8_t *)values)[at + i] = to_int8(v[j * D + i], value_scales[j * D + i]);
            }
        } else if (m->held == 1) {
            for (int64_t i = 0; i < D; i++) {
                ((uint16_t *)keys)[at + i] = to_bfloat16(k[j * D + i]);
                ((uint16_t *)values)[at + i] = to_bfloat16(v[j * D + i]);
            }
        } else {
            memcpy((float *)keys + at, k + j * D, D * sizeof(float));
            memcpy((float *)values + at, v + j * D, D * sizeof(float));
        }
    }
    int64_t group = Hq / KV;
    if (m->held == 2)  /* each query head times its key/value head's key scales */
        for (int64_t i = 0; i < Hq * D; i++) qkv[i] = qkv[i] * key_scales[(i / (group * D)) * D + i % D];
    if (m->attend(qkv, keys, values, head_stride, position + 1, (int)KV, (int)group, (int)D, m->scaling, m->held,
                  out, threads))
        return 1;
    if (m->held == 2)
        for (int64_t i = 0; i < Hq * D; i++) out[i] = out[i] * value_scales[(i / (group * D)) * D + i % D];
    product(m, &l->o, out, h, threads);
    for (int64_t i = 0; i < m->hidden; i++) x[i] = x[i] + h[i];
    m->norm(x, l->post_norm, h, 1, m->hidden, l->post_eps, threads);
    product(m, &l->gate_up, h, scratch + GATE_UP(m), threads);
    return 0;
}

/* The layer's MLP half, after the caller's activation: x += down(activation). */
void kvqa_llama_mlp_out(const struct model *m, int64_t index, float *scratch, int threads) {
    float *x = scratch + X(m), *h = scratch + H(m);
    product(m, &m->layers[index].down, scratch + ACT(m), h, threads);
    for (int64_t i = 0; i < m->hidden; i++) x[i] = x[i] + h[i];
}
