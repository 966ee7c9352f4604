// Reference logits, greedy tokens and tokenisations from llama.cpp, the outside
// oracle for the autoregressive engine. Our own small harness over llama.h;
// built by scripts/oracle/make_parity_fixtures.sh against the llama.cpp build
// from scripts/build_llama_cpp.sh.
//
//   llama_logits logits MODEL TOKENS.u32 OUT.f32 THREADS   all-position logits of one batch
//   llama_logits greedy MODEL TOKENS.u32 N OUT.u32 THREADS  N greedy tokens after the prompt
//   llama_logits tokenize MODEL TEXTFILE OUT.u32            llama.cpp's tokens (parse_special)
//   llama_logits dump MODEL TOKENS.u32 OUTDIR THREADS      every named f32 graph tensor of one
//                                                          batch as OUTDIR/NAME.f32 (+ OUTDIR/index.txt:
//                                                          name ne0 ne1 ne2 ne3), for layer-by-layer diffs
//
// Context: f32 K/V cache, flash attention off (docs/DESIGN.md §2.6), CPU only.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ggml-backend.h"
#include "llama.h"

static void *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(1); }
    fseek(f, 0, SEEK_END);
    *len = (size_t) ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc(*len + 1);
    if (fread(buf, 1, *len, f) != *len) { perror(path); exit(1); }
    ((char *) buf)[*len] = 0;
    fclose(f);
    return buf;
}

static void write_all(const char *path, const void *buf, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len) { perror(path); exit(1); }
    fclose(f);
}

static void quiet(enum ggml_log_level level, const char *text, void *ud) {
    (void) ud;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static const char *dump_dir;

// Eval callback of `dump`: asks for every tensor, writes the contiguous f32 ones.
static bool dump_cb(struct ggml_tensor *t, bool ask, void *ud) {
    (void) ud;
    if (ask) return true;
    if (t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t) || t->name[0] == 0) return true;
    // A name computed twice (e.g. `Kcur-3`: the product, then after rope)
    // keeps the first as NAME.f32 and numbers the later ones NAME#2.f32, ...
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.f32", dump_dir, t->name);
    for (int k = 2; access(path, F_OK) == 0; k++) {
        snprintf(path, sizeof path, "%s/%s#%d.f32", dump_dir, t->name, k);
    }
    size_t n = ggml_nbytes(t);
    void *buf = malloc(n);
    ggml_backend_tensor_get(t, buf, 0, n);
    write_all(path, buf, n);
    free(buf);
    snprintf(path, sizeof path, "%s/index.txt", dump_dir);
    FILE *f = fopen(path, "a");
    fprintf(f, "%s %lld %lld %lld %lld %s\n", t->name, (long long) t->ne[0], (long long) t->ne[1],
            (long long) t->ne[2], (long long) t->ne[3], ggml_op_desc(t));
    fclose(f);
    return true;
}

static struct llama_context *make_ctx(struct llama_model *model, int n_ctx, int threads) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_ctx;
    cp.n_ubatch = n_ctx;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
    if (dump_dir) {
        cp.cb_eval = dump_cb;
        cp.cb_eval_user_data = NULL;
    }
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "cannot create context\n"); exit(1); }
    return ctx;
}

static void decode(struct llama_context *ctx, const llama_token *toks, int n, int pos0, int all_logits) {
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = toks[i];
        b.pos[i] = pos0 + i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = all_logits || i == n - 1;
    }
    b.n_tokens = n;
    if (llama_decode(ctx, b) != 0) { fprintf(stderr, "llama_decode failed\n"); exit(1); }
    llama_batch_free(b);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: see the comment at the top of llama_logits.c\n");
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    const char *mode = argv[1];
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[2], mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[2]); return 1; }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    if (strcmp(mode, "tokenize") == 0) {
        size_t len;
        char *text = read_all(argv[3], &len);
        int cap = (int) len + 16;
        llama_token *toks = malloc(sizeof(llama_token) * cap);
        int n = llama_tokenize(vocab, text, (int) len, toks, cap, false, true);
        if (n < 0) { fprintf(stderr, "tokenize failed\n"); return 1; }
        write_all(argv[4], toks, sizeof(llama_token) * n);
        return 0;
    }

    size_t len;
    llama_token *prompt = read_all(argv[3], &len);
    int n = (int) (len / sizeof(llama_token));
    if (strcmp(mode, "dump") == 0) {
        dump_dir = argv[4];
        int threads = argc > 5 ? atoi(argv[5]) : 2;
        struct llama_context *ctx = make_ctx(model, n + 8, threads);
        decode(ctx, prompt, n, 0, 1);
        llama_free(ctx);
    } else if (strcmp(mode, "logits") == 0) {
        int threads = argc > 5 ? atoi(argv[5]) : 2;
        struct llama_context *ctx = make_ctx(model, n + 8, threads);
        decode(ctx, prompt, n, 0, 1);
        float *out = malloc(sizeof(float) * (size_t) n * n_vocab);
        for (int i = 0; i < n; i++) {
            memcpy(out + (size_t) i * n_vocab, llama_get_logits_ith(ctx, i), sizeof(float) * n_vocab);
        }
        write_all(argv[4], out, sizeof(float) * (size_t) n * n_vocab);
        llama_free(ctx);
    } else if (strcmp(mode, "greedy") == 0 && argc >= 6) {
        int n_gen = atoi(argv[4]);
        int threads = argc > 6 ? atoi(argv[6]) : 2;
        struct llama_context *ctx = make_ctx(model, n + n_gen + 8, threads);
        llama_token *gen = malloc(sizeof(llama_token) * n_gen);
        decode(ctx, prompt, n, 0, 0);
        for (int i = 0; i < n_gen; i++) {
            const float *lg = llama_get_logits_ith(ctx, -1);
            int best = 0;
            for (int v = 1; v < n_vocab; v++) if (lg[v] > lg[best]) best = v;
            gen[i] = best;
            decode(ctx, &gen[i], 1, n + i, 0);
        }
        write_all(argv[5], gen, sizeof(llama_token) * n_gen);
        llama_free(ctx);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    llama_model_free(model);
    return 0;
}
