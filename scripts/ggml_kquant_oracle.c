/* Writes K-quant / IQ4_XS / Q8_K fixtures from ggml itself, the oracle for
 * our quantisers and dot products: ggml's reference quantisers
 * (`quantize_row_*_ref`, libggml-base), its importance-weighted ones
 * (`quantize_*` with an imatrix) on one deterministic input row, and its
 * dot products (libggml-cpu: `ggml_vec_dot_*_q8_K_generic` and the build's
 * SIMD `ggml_vec_dot_*_q8_K`) of those weights with a quantised activation.
 *
 * Built and run by scripts/ggml_kquant_oracle.sh; see there. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

/* ggml's exported functions (ggml/src/ggml-quants.h), block pointers as void. */
void quantize_row_q2_K_ref(const float *x, void *y, int64_t k);
void quantize_row_q3_K_ref(const float *x, void *y, int64_t k);
void quantize_row_q4_K_ref(const float *x, void *y, int64_t k);
void quantize_row_q5_K_ref(const float *x, void *y, int64_t k);
void quantize_row_q6_K_ref(const float *x, void *y, int64_t k);
void quantize_row_q8_K_ref(const float *x, void *y, int64_t k);
void quantize_row_iq4_xs_ref(const float *x, void *y, int64_t k);
size_t quantize_q2_K(const float *src, void *dst, int64_t nrow, int64_t n_per_row, const float *imatrix);
size_t quantize_q3_K(const float *src, void *dst, int64_t nrow, int64_t n_per_row, const float *imatrix);
size_t quantize_q4_K(const float *src, void *dst, int64_t nrow, int64_t n_per_row, const float *imatrix);
size_t quantize_q5_K(const float *src, void *dst, int64_t nrow, int64_t n_per_row, const float *imatrix);
size_t quantize_q6_K(const float *src, void *dst, int64_t nrow, int64_t n_per_row, const float *imatrix);
size_t quantize_iq4_xs(const float *src, void *dst, int64_t nrow, int64_t n_per_row, const float *imatrix);
typedef void (*vec_dot_t)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nrc);
#define VD(t) void ggml_vec_dot_##t##_q8_K(int, float *, size_t, const void *, size_t, const void *, size_t, int); \
    void ggml_vec_dot_##t##_q8_K_generic(int, float *, size_t, const void *, size_t, const void *, size_t, int);
void ggml_cpu_init(void); /* fills the f16 tables the CPU dot products use */
VD(q2_K) VD(q3_K) VD(q4_K) VD(q5_K) VD(q6_K) VD(iq4_xs)

#define NB 16
#define N (256 * NB)

static uint32_t rng = 0x9E3779B9u;
static float uni(void) { /* [-1, 1) */
    rng ^= rng << 13; rng ^= rng >> 17; rng ^= rng << 5;
    return (float)(rng >> 8) / 8388608.0f - 1.0f;
}
static float gauss(void) { return (uni() + uni() + uni() + uni()) * 0.8660254f; }

static const char *dir;
static void put(const char *name, const void *p, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) { perror(path); exit(1); }
    fclose(f);
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]); return 2; }
    dir = argv[1];
    ggml_cpu_init();
    static float x[N], w[N], a[N];
    for (int b = 0; b < NB; ++b) {
        float *xb = x + 256 * b;
        for (int i = 0; i < 256; ++i) {
            switch (b) {
            case 0: xb[i] = 0.0f; break;                                   /* all zero */
            case 1: xb[i] = gauss(); break;                                /* plain */
            case 2: xb[i] = 1.0f + 0.5f * uni(); break;                    /* all positive */
            case 3: xb[i] = -1.0f + 0.5f * uni(); break;                   /* all negative */
            case 4: xb[i] = 1e-6f * gauss(); break;                        /* tiny */
            case 5: xb[i] = 1e3f * gauss(); break;                         /* large */
            case 6: xb[i] = (i == 77) ? 40.0f : gauss(); break;            /* one outlier */
            case 7: xb[i] = i < 128 ? 0.0f : gauss(); break;               /* zero half */
            default: xb[i] = gauss() * powf(10.0f, (float)((i / 32 + b) % 5) - 2.0f); break;
            }
        }
    }
    for (int i = 0; i < N; ++i) {
        w[i] = 0.1f + 5.0f * (uni() + 1.0f);
        if ((i / 16) % 7 == 3) w[i] *= 20.0f; /* some sub-blocks matter much more */
    }
    for (int i = 0; i < N; ++i) a[i] = gauss() * (1.0f + (float)(i % 7));
    put("input.f32", x, sizeof x);
    put("act.f32", a, sizeof a);
    static unsigned char qa[292 * NB];
    quantize_row_q8_K_ref(a, qa, N);
    put("imatrix.f32", w, sizeof w);

    struct { const char *name; size_t bytes; void (*ref)(const float *, void *, int64_t);
             size_t (*imat)(const float *, void *, int64_t, int64_t, const float *);
             vec_dot_t generic, simd; } t[] = {
        {"Q2_K", 84, quantize_row_q2_K_ref, quantize_q2_K, ggml_vec_dot_q2_K_q8_K_generic, ggml_vec_dot_q2_K_q8_K},
        {"Q3_K", 110, quantize_row_q3_K_ref, quantize_q3_K, ggml_vec_dot_q3_K_q8_K_generic, ggml_vec_dot_q3_K_q8_K},
        {"Q4_K", 144, quantize_row_q4_K_ref, quantize_q4_K, ggml_vec_dot_q4_K_q8_K_generic, ggml_vec_dot_q4_K_q8_K},
        {"Q5_K", 176, quantize_row_q5_K_ref, quantize_q5_K, ggml_vec_dot_q5_K_q8_K_generic, ggml_vec_dot_q5_K_q8_K},
        {"Q6_K", 210, quantize_row_q6_K_ref, quantize_q6_K, ggml_vec_dot_q6_K_q8_K_generic, ggml_vec_dot_q6_K_q8_K},
        {"IQ4_XS", 136, quantize_row_iq4_xs_ref, quantize_iq4_xs, ggml_vec_dot_iq4_xs_q8_K_generic, ggml_vec_dot_iq4_xs_q8_K},
        {"Q8_K", 292, quantize_row_q8_K_ref, NULL, NULL, NULL},
    };
    for (size_t k = 0; k < sizeof t / sizeof t[0]; ++k) {
        size_t n = t[k].bytes * NB;
        void *y = calloc(1, n);
        char name[64];
        t[k].ref(x, y, N);
        snprintf(name, sizeof name, "%s.ref.bin", t[k].name);
        put(name, y, n);
        if (t[k].generic) {
            /* Dots of the first 1, 3, 7 and 16 blocks: generic, then SIMD. */
            const int nbs[4] = {1, 3, 7, 16};
            float dots[8];
            for (int j = 0; j < 4; ++j) {
                t[k].generic(256 * nbs[j], &dots[j], 0, y, 0, qa, 0, 1);
                t[k].simd(256 * nbs[j], &dots[4 + j], 0, y, 0, qa, 0, 1);
            }
            snprintf(name, sizeof name, "%s.dot.f32", t[k].name);
            put(name, dots, sizeof dots);
        }
        if (t[k].imat) {
            memset(y, 0, n);
            t[k].imat(x, y, 1, N, w);
            snprintf(name, sizeof name, "%s.imat.bin", t[k].name);
            put(name, y, n);
        }
        free(y);
    }
    return 0;
}
