// What ik_llama.cpp's MTP block drafts after a token history: the oracle of
// tests/mtp_oracle.rs. Built against an ik_llama.cpp build tree by
// scripts/oracle/make_mtp_fixture.sh.
//
//   ik_mtp_drafts MODEL N_STEPS T0 T1 ... Tn
//
// The target context runs T0 … T(n−1) one token at a time and keeps each
// one's normed hidden state (the embeddings of a decode of several tokens are
// not their rows' hidden states in this build: they change with the batch
// size, and the logits of such a decode read as zeros); the MTP context is
// warmed up on those tokens in one batch with the hidden rows shifted by one
// (a zero row first), as ik_llama.cpp's speculative loop warms it after a
// prompt; then Tn is drafted from with the last hidden row, and
// each further step feeds the previous step's argmax with the MTP block's own
// output. Prints one JSON object: per step, the token fed, the argmax and the
// 16 largest logits.
#include "llama.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

// ik_llama.cpp's own entry points for its speculative loop (not in llama.h).
bool llama_set_draft_input_hidden_state_copy(llama_context * ctx, const float * hidden, size_t n_floats);
void llama_set_mtp_step_idx(llama_context * ctx, int32_t idx);
void llama_set_mtp_n_heads(llama_context * ctx, int32_t n);

static void fill(llama_batch & b, const std::vector<llama_token> & toks, int pos0) {
    b.n_tokens = (int32_t) toks.size();
    for (size_t i = 0; i < toks.size(); ++i) {
        b.token[i] = toks[i];
        b.pos[i] = pos0 + (llama_pos) i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = true;
    }
}

static void die(const char * what) {
    fprintf(stderr, "ik_mtp_drafts: %s\n", what);
    exit(1);
}

int main(int argc, char ** argv) {
    if (argc < 5) {
        die("usage: ik_mtp_drafts MODEL N_STEPS T0 ... Tn (n >= 1)");
    }
    const int n_steps = atoi(argv[2]);
    std::vector<llama_token> hist;
    for (int i = 3; i < argc; ++i) {
        hist.push_back(atoi(argv[i]));
    }
    const int n = (int) hist.size() - 1;

    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.mtp = true;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) die("cannot load the model");

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    cp.flash_attn = false;
    // K in f32; this build keeps V in f16 unless flash attention is on.
    cp.type_k = GGML_TYPE_F32;
    cp.mtp = true;
    cp.mtp_op_type = MTP_OP_NONE;
    llama_context * tgt = llama_init_from_model(model, cp);
    llama_context_params cpm = cp;
    cpm.mtp_op_type = MTP_OP_WARMUP;
    cpm.embeddings = true;
    llama_context * mtp = llama_init_from_model(model, cpm);
    if (!tgt || !mtp) die("cannot make the contexts");
    const int e = llama_model_n_embd(model);
    const int v = llama_n_vocab(model);

    llama_batch b = llama_batch_init(512, 0, 1);
    std::vector<llama_token> prefix(hist.begin(), hist.begin() + n);
    std::vector<float> shifted((size_t) n * e, 0.0f), last(e);
    for (int i = 0; i < n; ++i) {
        fill(b, {prefix[i]}, i);
        if (llama_decode(tgt, b) != 0) die("target decode failed");
        const float * h = llama_get_embeddings_ith(tgt, 0);
        if (!h) die("no hidden row from the target");
        // Entry p is fed h(p−1), a zero row first.
        if (i + 1 < n) memcpy(&shifted[(size_t) (i + 1) * e], h, e * sizeof(float));
        if (i + 1 == n) memcpy(last.data(), h, e * sizeof(float));
    }
    fill(b, prefix, 0);
    llama_set_mtp_n_heads(mtp, 1);
    llama_set_mtp_step_idx(mtp, 0);
    llama_set_mtp_op_type(mtp, MTP_OP_WARMUP);
    llama_set_draft_input_hidden_state_copy(mtp, shifted.data(), shifted.size());
    if (llama_decode(mtp, b) != 0) die("MTP warm-up failed");

    printf("{\"history\": [");
    for (int i = 0; i <= n; ++i) printf("%s%d", i ? ", " : "", hist[i]);
    printf("], \"steps\": [");
    llama_token tok = hist[n];
    std::vector<float> carry = last;
    for (int s = 0; s < n_steps; ++s) {
        llama_set_mtp_op_type(mtp, MTP_OP_DRAFT_GEN);
        llama_set_draft_input_hidden_state_copy(mtp, carry.data(), carry.size());
        fill(b, {tok}, n + s);
        if (llama_decode(mtp, b) != 0) die("MTP draft step failed");
        const float * lg = llama_get_logits_ith(mtp, 0);
        const float * g = llama_get_embeddings_ith(mtp, 0);
        if (!lg || !g) die("no MTP logits or hidden row");
        std::vector<int> idx(v);
        for (int i = 0; i < v; ++i) idx[i] = i;
        std::partial_sort(idx.begin(), idx.begin() + 16, idx.end(),
                          [&](int a, int c) { return lg[a] > lg[c] || (lg[a] == lg[c] && a < c); });
        printf("%s{\"token\": %d, \"argmax\": %d, \"top\": [", s ? ", " : "", tok, idx[0]);
        for (int i = 0; i < 16; ++i) printf("%s[%d, %.7g]", i ? ", " : "", idx[i], lg[idx[i]]);
        printf("]}");
        memcpy(carry.data(), g, e * sizeof(float));
        tok = idx[0];
    }
    printf("]}\n");
    llama_batch_free(b);
    llama_free(mtp);
    llama_free(tgt);
    llama_free_model(model);
    return 0;
}
