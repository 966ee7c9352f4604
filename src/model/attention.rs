//! Gated full attention (docs/DESIGN.md §2.2).
//!
//! Shapes (35B-A3B): u `[T][2048]`; `qg = attn_q·u` `[T][16·2·256]` where head
//! h owns `qg[h·512 .. h·512+256]` (query) and `qg[h·512+256 .. h·512+512]`
//! (output gate); `k, v = attn_k·u, attn_v·u` `[T][2·256]`.
//!
//! ```text
//! q_h = rope(rmsnorm(q_h) ⊙ q_norm, p)      k_g = rope(rmsnorm(k_g) ⊙ k_norm, p)
//! append k, v at position p
//! a_h = Σ_{s ≤ p} softmax_s(q_h·k_{s,g} / √d) · v_{s,g}     g = h / (n_head / n_head_kv)
//! out = attn_output · concat_h(a_h ⊙ σ(gate_h))
//! ```
//! `q·k` runs through the kernel table in the K cache's dot type (q is
//! converted into it, as ggml converts the activation). V rows are
//! dequantised and accumulated in f32; with an f16/bf16 V cache the softmax
//! weights are first rounded to that type, as ggml's non-flash-attention
//! `V·softmax` product converts them. That product sums over ggml's padded
//! K/V view (`n_kv = max(256, pad₂₅₆(positions))`; the masked cells add
//! exact zeros) in ggml's lane order: per output, fused products in 16
//! lanes by position — one accumulator set for a batch (llamafile's
//! tinyBLAS), four (`ggml_vec_dot_f32`, blocks of 64) for a single token —
//! reduced as `_mm512_reduce_add_ps` (see `v_weighted_sum`).
//!
//! The stages are shared with the diffusion pass (`diffusion.rs`), which
//! runs `project_qkv`, `qk_norm_rope`, `attend` over [`Span::Block`] (the
//! cache before the block plus every block row, whose K/V stay in f32
//! scratch) and `project_out`, without the cache append.

use kernels::matmul::KvDot;
use kernels::{scalar, GgmlType, Mode};
use rayon::prelude::*;

use super::config::ModelConfig;
use super::cx::Cx;
use super::kv::KvCache;
use super::linear::MatScratch;
use super::observe::{self, Op};
use super::ops::{
    dot_f32, fma_dispatch, mad_f16, mad_f16_rows, mad_f32, rmsnorm_inplace, round_to_f16, sigmoid,
    softmax_padded_inplace, RopeCache, GGML_LANES,
};
use super::weights::AttentionWeights;

mod flash;

/// Scratch of an attention layer for up to `max_batch` tokens.
#[derive(Debug)]
pub struct AttentionScratch {
    /// `[T][n_head·2·d]`.
    qg: Vec<f32>,
    /// `[T][n_head_kv·d]`.
    k: Vec<f32>,
    v: Vec<f32>,
    /// `[T][n_head·d]` gated attention output.
    o: Vec<f32>,
    /// Per head: `n_ctx` scores, q in the K dot type.
    scores: Vec<f32>,
    /// Per head: `d × 64` lane accumulators of `V·softmax`.
    vacc: Vec<f32>,
    q_act: Vec<u64>,
    q_act_words: usize,
    /// A batch's cached V rows in f32 (`[pos][n_head_kv][d]`), converted
    /// once for all its queries and heads; grown on the first batch.
    v_f32: Vec<f32>,
    /// A prompt batch's cached K in f32, transposed: `[n_head_kv][d][pos]`
    /// (positions padded to 16); grown on the first prompt batch.
    kt_f32: Vec<f32>,
    rope: RopeCache,
    n_ctx: usize,
}

impl AttentionScratch {
    pub fn new(cfg: &ModelConfig, t: usize, n_ctx: usize) -> AttentionScratch {
        let (nh, d) = (cfg.n_head, cfg.head_dim);
        // The widest conversion of a head: f32.
        let q_act_words = (d * 4).div_ceil(8);
        AttentionScratch {
            qg: vec![0.0; t * nh * 2 * d],
            k: vec![0.0; t * cfg.n_head_kv * d],
            v: vec![0.0; t * cfg.n_head_kv * d],
            o: vec![0.0; t * nh * d],
            scores: vec![0.0; nh * n_ctx],
            vacc: vec![0.0; nh * d * V_LANES],
            q_act: vec![0; nh * q_act_words],
            q_act_words,
            v_f32: Vec::new(),
            kt_f32: Vec::new(),
            rope: RopeCache::new(cfg.n_rot, cfg.rope_base, cfg.rope_sections),
            n_ctx,
        }
    }
}

/// What a pass's attention rows do with the KV cache.
pub enum KvRows<'k> {
    /// Appended to the cache, attending causally (decode, prompt, verify).
    Append(&'k mut KvCache),
    /// Appended to the cache and nothing more: the rows' outputs are left
    /// zero, for a pass whose outputs nothing reads (the MTP block catching
    /// its cache up).
    Store(&'k mut KvCache),
    /// A draft block (docs/DESIGN.md §3): each row attends to the cached
    /// positions before the block and to every block row, and is stored
    /// nowhere. `reverse_queries` (a test knob) evaluates the rows last to
    /// first.
    Block {
        kv: &'k KvCache,
        reverse_queries: bool,
    },
}

/// The attention mixer over `t` tokens at positions `pos0..pos0+t`. The KV
/// cache (layer `layer`) must hold exactly positions `0..pos0`.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    cx: Cx,
    w: &AttentionWeights,
    rows: KvRows,
    layer: usize,
    pos0: usize,
    u: &[f32],
    t: usize,
    sc: &mut AttentionScratch,
    lin: &mut MatScratch,
    out: &mut [f32],
) {
    let Cx { cfg, .. } = cx;
    let (nh, nkv, d) = (cfg.n_head, cfg.n_head_kv, cfg.head_dim);
    let rows = match rows {
        KvRows::Store(kv) => {
            store_kv(cx, w, kv, layer, pos0, u, t, sc, lin);
            out[..t * cfg.n_embd].fill(0.0);
            return;
        }
        rows => rows,
    };

    // 1. Projections.
    project_qkv(cx, w, u, t, sc, lin);
    observe::here("Qcur_full", t, &sc.qg[..t * nh * 2 * d]);
    observe::here("Kcur", t, &sc.k[..t * nkv * d]);
    observe::here("Vcur", t, &sc.v[..t * nkv * d]);
    // 2. Per-head norms and rope; append K/V; attend.
    let p = observe::enter(Op::Attention);
    match rows {
        KvRows::Append(kv) => {
            if observe::on() {
                // Row ti attends over positions 0..=pos0+ti.
                let hb = |ty: GgmlType| ty.row_bytes(d as u64).unwrap_or(0) as usize;
                let row = nkv * (hb(kv.ty_k) + hb(kv.ty_v));
                observe::bytes(row * (0..t).map(|ti| pos0 + ti + 1).sum::<usize>());
            }
            append_attend(cx, w, kv, layer, pos0, t, sc);
        }
        KvRows::Store(_) => unreachable!("stored above"),
        KvRows::Block {
            kv,
            reverse_queries,
        } => {
            qk_norm_rope(cfg, w, pos0, t, sc);
            if reverse_queries {
                attend(cx, kv, layer, pos0, t, (0..t).rev(), Span::Block, sc);
            } else {
                attend(cx, kv, layer, pos0, t, 0..t, Span::Block, sc);
            }
        }
    }
    drop(p);
    // 4. Output projection.
    project_out(cx, w, t, sc, lin, out);
}

/// Steps 2–3 of [`forward`] for the `t` projected rows in `sc`: q/k norms
/// and rope, the cache append, causal attention (query heads in parallel,
/// token by token).
fn append_attend(
    cx: Cx,
    w: &AttentionWeights,
    kv: &mut KvCache,
    layer: usize,
    pos0: usize,
    t: usize,
    sc: &mut AttentionScratch,
) {
    let Cx { cfg, .. } = cx;
    let (nh, nkv, d) = (cfg.n_head, cfg.n_head_kv, cfg.head_dim);
    qk_norm_rope(cfg, w, pos0, t, sc);
    store(cx, kv, layer, pos0, t, sc);
    if observe::wants_tensors() {
        let q: Vec<f32> = sc.qg[..t * nh * 2 * d]
            .chunks_exact(2 * d)
            .flat_map(|h| h[..d].to_vec())
            .collect();
        observe::here("Qcur", t, &q);
        observe::here("Kcur#2", t, &sc.k[..t * nkv * d]);
    }
    attend(cx, kv, layer, pos0, t, 0..t, Span::Causal, sc);
    observe::here("attn_gated", t, &sc.o[..t * nh * d]);
}

/// [`KvRows::Store`]: `k = attn_k·u` and `v = attn_v·u` for `t` rows (no
/// query, no gate), the keys normed and roped, both appended at `pos0..`.
#[allow(clippy::too_many_arguments)]
fn store_kv(
    cx: Cx,
    w: &AttentionWeights,
    kv: &mut KvCache,
    layer: usize,
    pos0: usize,
    u: &[f32],
    t: usize,
    sc: &mut AttentionScratch,
    lin: &mut MatScratch,
) {
    let Cx { kt, mode, cfg } = cx;
    let (nkv, d) = (cfg.n_head_kv, cfg.head_dim);
    {
        let _p = observe::enter(Op::AttnProj);
        lin.new_input();
        lin.project(kt, mode, &w.k, u, &mut sc.k[..t * nkv * d]);
        lin.project(kt, mode, &w.v, u, &mut sc.v[..t * nkv * d]);
    }
    let _p = observe::enter(Op::Attention);
    for ti in 0..t {
        sc.rope.set_position(pos0 + ti);
        for k in sc.k[ti * nkv * d..(ti + 1) * nkv * d].chunks_exact_mut(d) {
            norm_rope(k, &w.k_norm, cfg, &sc.rope);
        }
    }
    store(cx, kv, layer, pos0, t, sc);
}

/// Writes the `t` normed and roped K/V rows in `sc` to the cache at
/// `pos0..`.
fn store(cx: Cx, kv: &mut KvCache, layer: usize, pos0: usize, t: usize, sc: &AttentionScratch) {
    let (nkv, d) = (cx.cfg.n_head_kv, cx.cfg.head_dim);
    for ti in 0..t {
        let rows = ti * nkv * d..(ti + 1) * nkv * d;
        kv.write(cx.kt, layer, pos0 + ti, &sc.k[rows.clone()], &sc.v[rows]);
    }
}

/// Row `i` of a batched decoding step ([`super::batch`]): its projections,
/// already in `batch`, are normed, roped and appended to the sequence's own
/// cache `kv` at `pos`, attended with the sequence's scratch `one` exactly as
/// a one-token [`forward`] attends, and the result is put back in row `i` of
/// `batch.o`.
#[allow(clippy::too_many_arguments)]
pub(super) fn decode_row(
    cx: Cx,
    w: &AttentionWeights,
    kv: &mut KvCache,
    layer: usize,
    pos: usize,
    batch: &mut AttentionScratch,
    i: usize,
    one: &mut AttentionScratch,
) {
    let Cx { kt, cfg, .. } = cx;
    let (nh, nkv, d) = (cfg.n_head, cfg.n_head_kv, cfg.head_dim);
    let (q, kvw, o) = (nh * 2 * d, nkv * d, nh * d);
    one.qg[..q].copy_from_slice(&batch.qg[i * q..(i + 1) * q]);
    one.k[..kvw].copy_from_slice(&batch.k[i * kvw..(i + 1) * kvw]);
    one.v[..kvw].copy_from_slice(&batch.v[i * kvw..(i + 1) * kvw]);
    qk_norm_rope(cfg, w, pos, 1, one);
    kv.write(kt, layer, pos, &one.k[..kvw], &one.v[..kvw]);
    attend(cx, kv, layer, pos, 1, 0..1, Span::Causal, one);
    batch.o[i * o..(i + 1) * o].copy_from_slice(&one.o[..o]);
}

/// `qg = attn_q·u`, `k = attn_k·u`, `v = attn_v·u` for `t` rows (u converted
/// once per dot type).
pub(super) fn project_qkv(
    cx: Cx,
    w: &AttentionWeights,
    u: &[f32],
    t: usize,
    sc: &mut AttentionScratch,
    lin: &mut MatScratch,
) {
    let Cx { kt, mode, cfg } = cx;
    let (nh, nkv, d) = (cfg.n_head, cfg.n_head_kv, cfg.head_dim);
    let _p = observe::enter(Op::AttnProj);
    lin.new_input();
    lin.project(kt, mode, &w.q, u, &mut sc.qg[..t * nh * 2 * d]);
    lin.project(kt, mode, &w.k, u, &mut sc.k[..t * nkv * d]);
    lin.project(kt, mode, &w.v, u, &mut sc.v[..t * nkv * d]);
}

/// `out = attn_output · o` for `t` rows of the gated attention output.
pub(super) fn project_out(
    cx: Cx,
    w: &AttentionWeights,
    t: usize,
    sc: &AttentionScratch,
    lin: &mut MatScratch,
    out: &mut [f32],
) {
    let Cx { kt, mode, cfg } = cx;
    let nhd = cfg.n_head * cfg.head_dim;
    let _p = observe::enter(Op::AttnProj);
    lin.new_input();
    lin.project(kt, mode, &w.o, &sc.o[..t * nhd], &mut out[..t * cfg.n_embd]);
}

/// Per head of rows `0..t` (row ti at position `pos0 + ti`): q and k
/// RMS-normalised with `q_norm` / `k_norm`, then roped, in place in `sc.qg`
/// (the query half of each head) and `sc.k`.
pub(super) fn qk_norm_rope(
    cfg: &ModelConfig,
    w: &AttentionWeights,
    pos0: usize,
    t: usize,
    sc: &mut AttentionScratch,
) {
    let (nh, nkv, d) = (cfg.n_head, cfg.n_head_kv, cfg.head_dim);
    for ti in 0..t {
        sc.rope.set_position(pos0 + ti);
        let qrow = &mut sc.qg[ti * nh * 2 * d..(ti + 1) * nh * 2 * d];
        for head in qrow.chunks_exact_mut(2 * d) {
            norm_rope(&mut head[..d], &w.q_norm, cfg, &sc.rope);
        }
        for k in sc.k[ti * nkv * d..(ti + 1) * nkv * d].chunks_exact_mut(d) {
            norm_rope(k, &w.k_norm, cfg, &sc.rope);
        }
    }
}

/// One head's per-head RMS norm, then rope at the cache's set position.
#[inline]
fn norm_rope(head: &mut [f32], norm: &[f32], cfg: &ModelConfig, rope: &RopeCache) {
    rmsnorm_inplace(head, norm, cfg.rms_eps);
    rope.apply(&mut head[..cfg.n_rot]);
}

/// The keys and values a query row of [`attend`] sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Span {
    /// The AR pass: row ti sees the cache positions `0..=pos0+ti` (its own
    /// K/V already appended).
    Causal,
    /// The diffusion pass (docs/DESIGN.md §3): every row sees the cache positions
    /// `< pos0` and all `t` block rows, whose K/V stay in `sc.k` / `sc.v`
    /// (f32, never stored).
    Block,
}

/// Attention of the query rows `rows` (of `0..t`, in that order) over
/// `span`, query heads in parallel: scores `q·k / √d` (cache keys through the
/// kernel table in the K cache's dot type, block keys in f32), softmax over
/// the visible cells, `V·softmax` in ggml's order (module doc), gated by
/// `σ(gate)`; writes `sc.o`.
#[allow(clippy::too_many_arguments)]
pub(super) fn attend(
    cx: Cx,
    kv: &KvCache,
    layer: usize,
    pos0: usize,
    t: usize,
    rows: impl IntoIterator<Item = usize>,
    span: Span,
    sc: &mut AttentionScratch,
) {
    let Cx { kt, mode, cfg } = cx;
    let blocked = cfg.head_dim.is_multiple_of(KB);
    let prompt = mode == Mode::Prompt && t >= PROMPT_MIN_ROWS && blocked;
    if span == Span::Causal && (kv.flash || prompt) {
        let rows: Vec<usize> = rows.into_iter().collect();
        assert!(
            rows.iter().copied().eq(0..t),
            "a prompt batch attends every row"
        );
        match kv.flash {
            true => flash::attend_flash(kt, cfg, Causal { kv, layer, pos0, t }, sc),
            false => attend_prompt(cfg, Causal { kv, layer, pos0, t }, sc),
        }
        return;
    }
    let (nh, nkv, d, group, scale) = heads(cfg);
    let KvDot {
        q_ty,
        quantize: quant,
        dot,
    } = kt.plan_kv(kv.ty_k, d, t, mode);
    let q_bytes = q_ty.row_bytes(d as u64).expect("head is whole blocks") as usize;
    let ty_v = kv.ty_v;
    let n_ctx = sc.n_ctx;
    let qaw = sc.q_act_words;
    // tinyBLAS's lane order for a batch only in the ggml batch mode.
    let batch_order = t > 1 && mode == Mode::Ggml;
    // Block row j's K or V head g.
    let (bk, bv) = (&sc.k, &sc.v);
    let block_k = |j: usize, g: usize| &bk[(j * nkv + g) * d..(j * nkv + g + 1) * d];
    let block_v = |j: usize, g: usize| &bv[(j * nkv + g) * d..(j * nkv + g + 1) * d];
    // The heads of a task (and a batch's queries) read the same cached V
    // rows: convert them once (the same values the per-row conversion gives,
    // so the same bits). F32 and F16 rows are read where they lie (f16
    // converted in registers).
    let shared_v = !matches!(ty_v, GgmlType::F32 | GgmlType::F16);
    let n_cached = match span {
        Span::Causal => pos0 + t,
        Span::Block => pos0,
    };
    if shared_v {
        let need = n_cached * nkv * d;
        if sc.v_f32.len() < need {
            sc.v_f32.resize(need, 0.0);
        }
        sc.v_f32[..need]
            .par_chunks_mut(nkv * d)
            .enumerate()
            .for_each(|(s, heads)| {
                for (g, row) in heads.chunks_exact_mut(d).enumerate() {
                    scalar::dequantize_row(ty_v, kv.v_head(layer, s, g), row);
                }
            });
    }
    let v_f32 = &sc.v_f32;
    // Tasks of `hpt` query heads within one KV group: each K and V row is
    // read from memory once per task and reused from cache by its heads.
    let hpt = heads_per_task(group, nkv, rayon::current_num_threads());
    for ti in rows {
        let (n_cache, n_block) = match span {
            Span::Causal => (pos0 + ti + 1, 0),
            Span::Block => (pos0, t),
        };
        let n_vis = n_cache + n_block;
        let qrow = &sc.qg[ti * nh * 2 * d..(ti + 1) * nh * 2 * d];
        let orow = &mut sc.o[ti * nh * d..(ti + 1) * nh * d];
        orow.par_chunks_mut(hpt * d)
            .zip(sc.scores.par_chunks_mut(hpt * n_ctx))
            .zip(sc.vacc.par_chunks_mut(hpt * d * V_LANES))
            .zip(sc.q_act.par_chunks_mut(hpt * qaw))
            .enumerate()
            .for_each(|(task, (((o, scores), vacc), q_act))| {
                let h0 = task * hpt;
                let g = h0 / group;
                let q = |i: usize| &qrow[(h0 + i) * 2 * d..(h0 + i) * 2 * d + d];
                let q_act = bytemuck::cast_slice_mut::<u64, u8>(q_act);
                let qa_bytes = qaw * size_of::<u64>();
                for i in 0..hpt {
                    quant(q(i), &mut q_act[i * qa_bytes..i * qa_bytes + q_bytes]);
                }
                let qa = |i: usize| &q_act[i * qa_bytes..i * qa_bytes + q_bytes];
                // Scores, a block of positions at a time for every head.
                for s0 in (0..n_cache).step_by(SCORE_BLOCK) {
                    let s1 = (s0 + SCORE_BLOCK).min(n_cache);
                    for (i, sc) in scores.chunks_exact_mut(n_ctx).enumerate() {
                        for (s, sc) in sc[s0..s1].iter_mut().enumerate() {
                            *sc = dot(d, kv.k_head(layer, s0 + s, g), qa(i)) * scale;
                        }
                    }
                }
                for (i, sc) in scores.chunks_exact_mut(n_ctx).enumerate() {
                    for (j, sc) in sc[n_cache..n_vis].iter_mut().enumerate() {
                        *sc = dot_f32(kt, q(i), block_k(j, g)) * scale;
                    }
                    softmax_padded_inplace(&mut sc[..n_vis]);
                    round_to_v_type(ty_v, &mut sc[..n_vis]);
                }
                v_weighted_sum((scores, n_ctx, n_vis), (o, d), vacc, batch_order, |s| {
                    if s >= n_cache {
                        return VRow::F32(block_v(s - n_cache, g));
                    }
                    if shared_v {
                        let at = (s * nkv + g) * d;
                        return VRow::F32(&v_f32[at..at + d]);
                    }
                    let vh = kv.v_head(layer, s, g);
                    match ty_v {
                        GgmlType::F16 => VRow::F16(bytemuck::cast_slice(vh)),
                        _ => VRow::F32(bytemuck::cast_slice(vh)),
                    }
                });
                for (i, o) in o.chunks_exact_mut(d).enumerate() {
                    let gate = &qrow[(h0 + i) * 2 * d + d..(h0 + i + 1) * 2 * d];
                    for (oj, &gj) in o.iter_mut().zip(gate) {
                        *oj *= sigmoid(gj);
                    }
                }
            });
    }
}

/// Cached positions scored for every head of a task before the next block
/// (their K rows, 64 × 512 bytes at the full shape, stay in L1/L2).
const SCORE_BLOCK: usize = 64;

/// Query heads per attention task: a whole KV group when the groups alone
/// give every thread one, else the group split (by a divisor of its size)
/// until they do.
fn heads_per_task(group: usize, nkv: usize, threads: usize) -> usize {
    let mut hpt = group;
    while nkv * (group / hpt) < threads && hpt > 1 {
        hpt = (1..hpt)
            .rev()
            .find(|&c| group.is_multiple_of(c))
            .unwrap_or(1);
    }
    hpt
}

/// The head shape every form of the attention reads: query heads, KV
/// heads, head width, query heads per KV head, and the score scale 1/√d.
pub(super) fn heads(cfg: &ModelConfig) -> (usize, usize, usize, usize, f32) {
    let (nh, nkv, d) = (cfg.n_head, cfg.n_head_kv, cfg.head_dim);
    (nh, nkv, d, nh / nkv, 1.0 / (d as f32).sqrt())
}

/// The rows a causal form of the attention reads: `t` rows at
/// `pos0..pos0 + t` of `layer`, their K and V already in `kv`.
#[derive(Clone, Copy)]
pub(super) struct Causal<'a> {
    kv: &'a KvCache,
    layer: usize,
    pos0: usize,
    t: usize,
}

/// The fewest rows of a prompt batch that [`attend_prompt`] takes.
const PROMPT_MIN_ROWS: usize = 8;
/// Query rows per register block of [`attend_prompt`].
const QB: usize = 4;
/// Key positions per vector of scores (the lanes) in [`attend_prompt`].
const KB: usize = 16;

/// Causal attention of a prompt batch ([`Mode::Prompt`]): the math of
/// [`attend`], in its own f32 order and at a fraction of the cost. K and V of
/// every visible position are converted to f32 once per layer (K transposed
/// per KV head, `[g][dim][position]`, so that 16 positions are the lanes of
/// a vector); then, per block of [`QB`] query rows and per head, the scores
/// of all the block's visible positions are register-blocked products (each
/// K vector serves [`QB`] queries), the softmax runs over each row's own
/// visible positions (weights past them are zero), and `V·softmax` is
/// register-blocked the same way (each V row serves [`QB`] queries). The
/// query is used in f32, not converted to the K cache's dot type. Decoding,
/// verify passes and `--batch-order ggml` keep [`attend`]'s order.
fn attend_prompt(cfg: &ModelConfig, rows: Causal, sc: &mut AttentionScratch) {
    let Causal { kv, layer, pos0, t } = rows;
    let (nh, nkv, d, group, scale) = heads(cfg);
    let n = pos0 + t;
    let np = n.next_multiple_of(KB);
    if sc.kt_f32.len() < nkv * d * np {
        sc.kt_f32.resize(nkv * d * np, 0.0);
    }
    if sc.v_f32.len() < n * nkv * d {
        sc.v_f32.resize(n * nkv * d, 0.0);
    }
    let (ty_k, ty_v) = (kv.ty_k, kv.ty_v);
    sc.v_f32[..n * nkv * d]
        .par_chunks_mut(nkv * d)
        .enumerate()
        .for_each(|(s, heads)| {
            for (g, row) in heads.chunks_exact_mut(d).enumerate() {
                scalar::dequantize_row(ty_v, kv.v_head(layer, s, g), row);
            }
        });
    sc.kt_f32[..nkv * d * np]
        .par_chunks_mut(d * np)
        .enumerate()
        .for_each(|(g, kt)| {
            let mut row = vec![0f32; d];
            for s in 0..n {
                scalar::dequantize_row(ty_k, kv.k_head(layer, s, g), &mut row);
                for (j, &x) in row.iter().enumerate() {
                    kt[j * np + s] = x;
                }
            }
            for j in 0..d {
                kt[j * np + n..(j + 1) * np].fill(0.0);
            }
        });
    let (kt, vf, qg) = (&sc.kt_f32, &sc.v_f32, &sc.qg);
    sc.o[..t * nh * d]
        .par_chunks_mut(QB * nh * d)
        .enumerate()
        .for_each_init(
            || (Vec::new(), Vec::new()),
            |(scores, q_rounded): &mut (Vec<f32>, Vec<f32>), (blk, o)| {
                let i0 = blk * QB;
                let nq = o.len() / (nh * d);
                // Positions the block's last row sees; rows past `nq` repeat
                // the last one (computed, never written).
                let n_max = pos0 + i0 + nq;
                let nb = n_max.next_multiple_of(KB);
                scores.resize(QB * nb, 0.0);
                let row = |qi: usize| i0 + qi.min(nq - 1);
                for h in 0..nh {
                    let g = h / group;
                    let q_at = |qi: usize| row(qi) * nh * 2 * d + h * 2 * d;
                    // q in the K cache's float type, as the decode path's dot
                    // (and ggml's, which converts the activation) takes it; an
                    // f32 cache reads q where it lies.
                    let round_q = matches!(ty_k, GgmlType::F16 | GgmlType::BF16);
                    if round_q {
                        q_rounded.resize(QB * d, 0.0);
                        for qi in 0..QB {
                            let dst = &mut q_rounded[qi * d..(qi + 1) * d];
                            dst.copy_from_slice(&qg[q_at(qi)..q_at(qi) + d]);
                            round_to_v_type(ty_k, dst);
                        }
                    }
                    let q: [&[f32]; QB] = std::array::from_fn(|qi| match round_q {
                        true => &q_rounded[qi * d..(qi + 1) * d],
                        false => &qg[q_at(qi)..q_at(qi) + d],
                    });
                    let kg = &kt[g * d * np..(g + 1) * d * np];
                    prompt_scores(q, kg, np, nb, scores);
                    for qi in 0..QB {
                        let sr = &mut scores[qi * nb..(qi + 1) * nb];
                        let vis = pos0 + row(qi) + 1;
                        sr[..vis].iter_mut().for_each(|x| *x *= scale);
                        softmax_padded_inplace(&mut sr[..vis]);
                        round_to_v_type(ty_v, &mut sr[..vis]);
                        sr[vis..].fill(0.0);
                    }
                    let mut out = [[0f32; KB]; QB];
                    for c in (0..d).step_by(KB) {
                        prompt_v_sum(scores, nb, n_max, vf, (nkv * d, g * d + c), &mut out);
                        for (qi, oq) in out.iter().enumerate().take(nq) {
                            let at = qi * nh * d + h * d + c;
                            let gate = &qg[(i0 + qi) * nh * 2 * d + h * 2 * d + d + c..][..KB];
                            for ((x, &y), &gj) in o[at..at + KB].iter_mut().zip(oq).zip(gate) {
                                *x = y * sigmoid(gj);
                            }
                        }
                    }
                }
            },
        );
}

fma_dispatch!(
    /// `scores[qi·nb + s] = q[qi] · k_s` for positions `s < nb` (a multiple
    /// of [`KB`]) from the transposed keys `kt` (`[dim][np]`).
    fn prompt_scores(q: [&[f32]; QB], kt: &[f32], np: usize, nb: usize, scores: &mut [f32])
        => prompt_scores_body
);

#[inline(always)]
fn prompt_scores_body(q: [&[f32]; QB], kt: &[f32], np: usize, nb: usize, scores: &mut [f32]) {
    let d = q[0].len();
    for s0 in (0..nb).step_by(KB) {
        let mut acc = [[0f32; KB]; QB];
        for j in 0..d {
            let k: &[f32; KB] = kt[j * np + s0..j * np + s0 + KB].try_into().unwrap();
            for (a, qr) in acc.iter_mut().zip(&q) {
                let x = qr[j];
                for (al, &kl) in a.iter_mut().zip(k) {
                    *al = x.mul_add(kl, *al);
                }
            }
        }
        for (qi, a) in acc.iter().enumerate() {
            scores[qi * nb + s0..qi * nb + s0 + KB].copy_from_slice(a);
        }
    }
}

fma_dispatch!(
    /// `out[qi][l] = Σ_{s < n} p[qi·nb + s] · v[s·stride + off + l]` for
    /// the [`KB`] dims from `off` (`(stride, off)`).
    fn prompt_v_sum(
        p: &[f32],
        nb: usize,
        n: usize,
        v: &[f32],
        at: (usize, usize),
        out: &mut [[f32; KB]; QB]
    ) => prompt_v_sum_body
);

#[inline(always)]
fn prompt_v_sum_body(
    p: &[f32],
    nb: usize,
    n: usize,
    v: &[f32],
    (stride, off): (usize, usize),
    out: &mut [[f32; KB]; QB],
) {
    let mut acc = [[0f32; KB]; QB];
    for s in 0..n {
        let vr: &[f32; KB] = v[s * stride + off..s * stride + off + KB]
            .try_into()
            .unwrap();
        for (qi, a) in acc.iter_mut().enumerate() {
            let w = p[qi * nb + s];
            for (al, &vl) in a.iter_mut().zip(vr) {
                *al = w.mul_add(vl, *al);
            }
        }
    }
    *out = acc;
}

/// Lane accumulators per output of `v_weighted_sum`: 4 × 16.
const V_LANES: usize = 4 * GGML_LANES;

/// A V row as [`v_weighted_sum`] reads it, where it lies.
#[derive(Clone, Copy)]
enum VRow<'a> {
    F32(&'a [f32]),
    /// f16 bits, converted in registers.
    F16(&'a [u16]),
}

/// `o[j] = Σ_s p[s]·v_s[j]` in ggml's order (module doc), for each head of a
/// task sharing one KV head: `p = (weights, stride, n)` holds each head's
/// visible weights (positions `0..n`) `stride` apart, `(o, d)` each head's
/// output of `d` floats, `acc` each head's `d × 64` lane accumulators;
/// `v_row(s)` gives V at position s. `batch` selects tinyBLAS's single
/// 16-lane set, else `ggml_vec_dot_f32`'s four sets over blocks of 64 folded
/// `(a0+a2) + (a1+a3)`.
///
/// Lane by lane: lane l's accumulator row of each head takes the fused
/// products of positions l, l + span, … in increasing order, which is exactly
/// the sequence each (lane, output) sees position by position, so every bit
/// is the same. A lane's V rows are gathered once per task and serve all its
/// heads; f16 rows go through [`mad_f16_rows`], which keeps the accumulators
/// in registers across them.
fn v_weighted_sum<'a>(
    (p, stride, n): (&[f32], usize, usize),
    (o, d): (&mut [f32], usize),
    acc: &mut [f32],
    batch: bool,
    v_row: impl Fn(usize) -> VRow<'a>,
) {
    let heads = o.len() / d;
    assert!(
        o.len() == heads * d
            && acc.len() == heads * d * V_LANES
            && p.len() >= (heads - 1) * stride + n,
        "v_weighted_sum: shapes"
    );
    acc.fill(0.0);
    let span = if batch { GGML_LANES } else { V_LANES };
    let per_lane = n.div_ceil(span);
    let mut rows: Vec<VRow> = Vec::with_capacity(per_lane);
    let mut f16_rows: Vec<&[u16]> = Vec::with_capacity(per_lane);
    let mut w: Vec<f32> = Vec::with_capacity(per_lane);
    for lane in 0..span.min(n) {
        rows.clear();
        rows.extend((lane..n).step_by(span).map(&v_row));
        f16_rows.clear();
        f16_rows.extend(rows.iter().map_while(|r| match r {
            VRow::F16(r) => Some(&r[..d]),
            VRow::F32(_) => None,
        }));
        for (h, acc) in acc.chunks_exact_mut(d * V_LANES).enumerate() {
            let a = &mut acc[lane * d..(lane + 1) * d];
            w.clear();
            w.extend((lane..n).step_by(span).map(|s| p[h * stride + s]));
            if f16_rows.len() == rows.len() {
                mad_f16_rows(a, &f16_rows, &w);
                continue;
            }
            for (r, &wi) in rows.iter().zip(&w) {
                match *r {
                    VRow::F32(r) => mad_f32(a, &r[..d], wi),
                    VRow::F16(r) => mad_f16(a, &r[..d], wi),
                }
            }
        }
    }
    for (acc, o) in acc.chunks_exact_mut(d * V_LANES).zip(o.chunks_exact_mut(d)) {
        reduce_lanes(acc, o, batch);
    }
}

/// One head's output from its lane accumulators `acc` (`[lane][d]`): per
/// output j, lanes l = (a_l + a_{32+l}) + (a_{16+l} + a_{48+l}) (or a_l for
/// `batch`), then `reduce_add_16`'s tree. Done row by row over j (each j's
/// adds in the same association), so it vectorises.
fn reduce_lanes(acc: &mut [f32], o: &mut [f32], batch: bool) {
    let d = o.len();
    let row = |l: usize| l * d..(l + 1) * d;
    if !batch {
        for l in 0..GGML_LANES {
            for j in 0..d {
                let a = |k: usize| acc[k * d + j];
                acc[l * d + j] =
                    (a(l) + a(2 * GGML_LANES + l)) + (a(GGML_LANES + l) + a(3 * GGML_LANES + l));
            }
        }
    }
    for half in [8, 4] {
        let (lo, hi) = acc[..2 * half * d].split_at_mut(half * d);
        for (x, y) in lo.iter_mut().zip(hi.iter()) {
            *x += *y;
        }
    }
    let (t0, t1, t2, t3) = (&acc[row(0)], &acc[row(1)], &acc[row(2)], &acc[row(3)]);
    for (j, oj) in o.iter_mut().enumerate() {
        *oj = (t0[j] + t2[j]) + (t1[j] + t3[j]);
    }
}

/// Rounds values to a cache's float type (no-op for f32/q8_0): softmax
/// weights to the V cache's, queries to the K cache's.
fn round_to_v_type(ty_v: GgmlType, p: &mut [f32]) {
    match ty_v {
        GgmlType::F16 => round_to_f16(p),
        GgmlType::BF16 => p
            .iter_mut()
            .for_each(|x| *x = half::bf16::from_f32(*x).to_f32()),
        _ => {}
    }
}

#[cfg(test)]
#[path = "attention_tests.rs"]
pub(crate) mod tests;
