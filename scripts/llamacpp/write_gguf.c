// Writes GGUF files with llama.cpp's own code: ggml's quantizers
// (ggml_quantize_chunk) and its GGUF writer (gguf_*), for the tests of
// bundlescope's GGUF reader (tests/gguf_llamacpp.rs). Built and run by
// scripts/make-llamacpp-gguf.sh against the ggml sources vendored in the
// pinned llama-cpp-python sdist; nothing of ours is linked in.
//
//   write_gguf WEIGHTS.f32 ROWS COLS MATRICES OUT_DIR
//
// WEIGHTS.f32 holds MATRICES row-major float32 matrices of ROWS x COLS
// (real weights, cut by the script). Writes into OUT_DIR:
//   all-types.gguf  one tensor in every type ggml_quantize_chunk makes
//                   (blk.N.<type>.weight, ne = [COLS, ROWS]), F32/F16/BF16
//                   included, but Q2_0, which gguf-py 0.19 cannot read
//   q2_0.gguf       a Q2_0 tensor (and an F32 one), on its own
//   mlx-types.gguf  only the types MLX's GGUF loader reads (F32, F16, Q4_0,
//                   Q4_1, Q8_0, Q2_K, Q4_K, Q6_K), two tensors of each
//                   quantized one
//   ggml-types.tsv  ggml's own type table: number, name, block size, bytes
//                   per block, for every type it knows
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>

#include "ggml.h"
#include "gguf.h"

static void die(const char *what) {
    fprintf(stderr, "write_gguf: %s\n", what);
    exit(1);
}

// Adds tensor `name` of `type`, made from `src` (rows x cols floats), to
// `gguf`; its bytes live in `ctx` until the file is written.
static void add(struct ggml_context *ctx, struct gguf_context *gguf, const char *name,
                enum ggml_type type, const float *src, int64_t rows, int64_t cols,
                const float *imatrix) {
    struct ggml_tensor *t = ggml_new_tensor_2d(ctx, type, cols, rows);
    if (t == NULL) die("ggml_new_tensor_2d failed");
    ggml_set_name(t, name);
    size_t bytes = ggml_quantize_chunk(type, src, t->data, 0, rows, cols,
                                       ggml_quantize_requires_imatrix(type) ? imatrix : NULL);
    if (bytes != ggml_nbytes(t)) die("ggml_quantize_chunk wrote an unexpected size");
    gguf_add_tensor(gguf, t);
}

static void lower(char *dst, const char *src, size_t n) {
    size_t i = 0;
    for (; src[i] && i + 1 < n; i++) dst[i] = (char)tolower((unsigned char)src[i]);
    dst[i] = 0;
}

static struct gguf_context *new_file(const char *name) {
    struct gguf_context *g = gguf_init_empty();
    gguf_set_val_str(g, "general.architecture", "bert");
    gguf_set_val_str(g, "general.name", name);
    gguf_set_val_str(g, "general.source", "all-MiniLM-L6-v2 output.dense weights, quantized by ggml");
    gguf_set_val_u32(g, "general.quantization_version", GGML_QNT_VERSION);
    return g;
}

int main(int argc, char **argv) {
    if (argc != 6) die("usage: write_gguf WEIGHTS.f32 ROWS COLS MATRICES OUT_DIR");
    const int64_t rows = atoll(argv[2]), cols = atoll(argv[3]), mats = atoll(argv[4]);
    if (rows <= 0 || cols <= 0 || cols % 256 != 0 || mats <= 0) die("bad ROWS/COLS/MATRICES");
    const size_t n = (size_t)(rows * cols);
    float *w = malloc(n * mats * sizeof(float));
    if (w == NULL) die("out of memory");
    FILE *f = fopen(argv[1], "rb");
    if (f == NULL || fread(w, sizeof(float), n * mats, f) != n * mats) die("cannot read the weights");
    fclose(f);
    // The importance matrix the IQ2/IQ1 quantizers require: the mean square
    // of each column over the rows, as llama-imatrix's activations would weigh them.
    float *imatrix = calloc((size_t)cols, sizeof(float));
    if (imatrix == NULL) die("out of memory");
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) imatrix[c] += w[r * cols + c] * w[r * cols + c] / rows;

    // Every type ggml_quantize_chunk makes (its switch), F32 last.
    const enum ggml_type all[] = {
        GGML_TYPE_F16,     GGML_TYPE_BF16,   GGML_TYPE_Q4_0,   GGML_TYPE_Q4_1,   GGML_TYPE_Q5_0,
        GGML_TYPE_Q5_1,    GGML_TYPE_Q8_0,   GGML_TYPE_Q2_K,   GGML_TYPE_Q3_K,   GGML_TYPE_Q4_K,
        GGML_TYPE_Q5_K,    GGML_TYPE_Q6_K,   GGML_TYPE_MXFP4,  GGML_TYPE_NVFP4,  GGML_TYPE_Q1_0,
        GGML_TYPE_TQ1_0,  GGML_TYPE_TQ2_0,  GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS,
        GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S,  GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ3_S,
        GGML_TYPE_IQ1_S,   GGML_TYPE_IQ1_M,  GGML_TYPE_F32,
    };
    const enum ggml_type mlx[] = {
        GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q8_0, GGML_TYPE_Q2_K,
        GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_F16,  GGML_TYPE_F32,
    };
    const size_t n_all = sizeof(all) / sizeof(all[0]), n_mlx = sizeof(mlx) / sizeof(mlx[0]);
    struct ggml_init_params p = {
        .mem_size = (n_all + 2 * n_mlx + 2) * (n * sizeof(float) + ggml_tensor_overhead()) + (1 << 20),
        .mem_buffer = NULL,
        .no_alloc = false,
    };
    struct ggml_context *ctx = ggml_init(p);
    if (ctx == NULL) die("ggml_init failed");
    char name[96], low[32], path[4096];

    struct gguf_context *g = new_file("llama.cpp every type");
    for (size_t i = 0; i < n_all; i++) {
        lower(low, ggml_type_name(all[i]), sizeof low);
        snprintf(name, sizeof name, "blk.%zu.%s.weight", i, low);
        add(ctx, g, name, all[i], w + (i % mats) * n, rows, cols, imatrix);
    }
    snprintf(path, sizeof path, "%s/all-types.gguf", argv[5]);
    if (!gguf_write_to_file(g, path, false)) die("gguf_write_to_file failed (all-types)");
    gguf_free(g);

    g = new_file("llama.cpp MLX-readable types");
    for (size_t i = 0; i < n_mlx; i++) {
        int copies = ggml_is_quantized(mlx[i]) ? 2 : 1;
        for (int k = 0; k < copies; k++) {
            lower(low, ggml_type_name(mlx[i]), sizeof low);
            snprintf(name, sizeof name, "blk.%d.%s.weight", k, low);
            add(ctx, g, name, mlx[i], w + ((i + k) % mats) * n, rows, cols, imatrix);
        }
    }
    snprintf(path, sizeof path, "%s/mlx-types.gguf", argv[5]);
    if (!gguf_write_to_file(g, path, false)) die("gguf_write_to_file failed (mlx-types)");
    gguf_free(g);

    g = new_file("llama.cpp Q2_0");
    add(ctx, g, "blk.0.q2_0.weight", GGML_TYPE_Q2_0, w, rows, cols, imatrix);
    add(ctx, g, "blk.0.f32.weight", GGML_TYPE_F32, w + (mats > 1 ? n : 0), rows, cols, imatrix);
    snprintf(path, sizeof path, "%s/q2_0.gguf", argv[5]);
    if (!gguf_write_to_file(g, path, false)) die("gguf_write_to_file failed (q2_0)");
    gguf_free(g);

    snprintf(path, sizeof path, "%s/ggml-types.tsv", argv[5]);
    f = fopen(path, "w");
    if (f == NULL) die("cannot write ggml-types.tsv");
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const struct ggml_type_traits *tr = ggml_get_type_traits((enum ggml_type)t);
        if (tr->blck_size == 0) continue;  // a retired number
        fprintf(f, "%d\t%s\t%lld\t%zu\n", t, tr->type_name, (long long)tr->blck_size, tr->type_size);
    }
    fclose(f);
    ggml_free(ctx);
    free(imatrix);
    free(w);
    return 0;
}
