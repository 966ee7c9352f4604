//! Gated DeltaNet, token by token (docs/DESIGN.md §2.1).
//!
//! Shapes (35B-A3B): u `[T][2048]`; `mixed = attn_qkv·u` `[T][8192]` (q 16×128,
//! k 16×128, v 32×128); `z = attn_gate·u` `[T][4096]`; `b, a` `[T][32]`.
//!
//! ```text
//! β_h = σ(b_h)              g_h = softplus(a_h + dt_bias_h) · ssm_a_h   (≤ 0)
//! c_t = silu(Σ_{j<K} w[j] · mixed_{t−K+1+j})        (conv window = last K−1 mixed)
//! q̂, k̂ = L2(q), L2(k) per key head;  value head h reads key head h % n_k
//! S ← e^g · S;  m_j = Σ_i S[i][j] k[i];  δ_j = β (v_j − m_j);  S[i][j] += k[i] δ_j
//! o_j = (Σ_i S[i][j] q̂[i]) / √d_k
//! out = ssm_out · concat_h( rmsnorm(o_h) ⊙ ssm_norm ⊙ silu(z_h) )
//! ```
//! The state is stored transposed (`ssm[h][j][i] = S[i][j]`), so every step
//! works on contiguous rows j. The 1/√d_k scale is applied to the read-out, as
//! llama.cpp's fused recurrence does (the same value as scaling q).

use std::ops::Range;

use kernels::sig::ReplayStep;
use kernels::KernelTable;
use rayon::prelude::*;

use super::chunked::{self, ChunkScratch, HeadInputs};
use super::config::ModelConfig;
use super::cx::Cx;
use super::linear::MatScratch;
use super::observe::{self, Op};
use super::ops::{
    by_tap, dot_f32, l2norm_inplace, mad_f32, rmsnorm, sigmoid, silu_row, softplus, split_rows,
    PAR_MIN_ELEMS,
};
use super::recurrent::{DeltaNetState, GdnStash};
use super::weights::DeltaNetWeights;

/// Scratch of a GDN layer for up to `max_batch` tokens.
#[derive(Debug)]
pub struct DeltaNetScratch {
    /// `[T][channels]` pre-conv projections.
    pub(super) mixed: Vec<f32>,
    /// `[T][channels]` post-conv, post-silu, q/k L2-normalised.
    pub(super) conv: Vec<f32>,
    /// `[T][inner]` output gate.
    pub(super) z: Vec<f32>,
    /// `[T][n_v]` β, then g.
    pub(super) beta: Vec<f32>,
    pub(super) gate: Vec<f32>,
    /// `[n_v][T][d_v]` read-outs, head-major for disjoint parallel writes.
    pub(super) o_heads: Vec<f32>,
    /// `[T][inner]` gated-norm output.
    pub(super) o: Vec<f32>,
    /// Run batches of more than one token through the chunked form
    /// (`chunked.rs`) instead of token by token. Off by default: the token
    /// form is llama.cpp's and what verify replays bit-exactly.
    pub chunked: bool,
    /// Per value head, for the chunked form.
    chunk: Vec<ChunkScratch>,
}

impl DeltaNetScratch {
    /// Copies projected row `i` of the batch scratch `batch` into row 0 here
    /// (a batched step's sequence, about to run [`recur`] on one token).
    pub(super) fn take_row(&mut self, cfg: &ModelConfig, batch: &DeltaNetScratch, i: usize) {
        let (ch, hv) = (cfg.ssm_conv_channels(), cfg.ssm_n_v_heads);
        self.mixed[..ch].copy_from_slice(&batch.mixed[i * ch..(i + 1) * ch]);
        self.beta[..hv].copy_from_slice(&batch.beta[i * hv..(i + 1) * hv]);
        self.gate[..hv].copy_from_slice(&batch.gate[i * hv..(i + 1) * hv]);
    }

    /// Copies the one-token read-outs of `one` into row `i` of this batch
    /// scratch of `n` rows.
    pub(super) fn put_heads(
        &mut self,
        cfg: &ModelConfig,
        one: &DeltaNetScratch,
        i: usize,
        n: usize,
    ) {
        let (hv, d) = (cfg.ssm_n_v_heads, cfg.ssm_head_dim);
        for h in 0..hv {
            self.o_heads[(h * n + i) * d..(h * n + i + 1) * d]
                .copy_from_slice(&one.o_heads[h * d..(h + 1) * d]);
        }
    }

    pub fn new(cfg: &ModelConfig, t: usize) -> DeltaNetScratch {
        let ch = cfg.ssm_conv_channels();
        let inner = cfg.ssm_inner();
        let hv = cfg.ssm_n_v_heads;
        DeltaNetScratch {
            mixed: vec![0.0; t * ch],
            conv: vec![0.0; t * ch],
            z: vec![0.0; t * inner],
            beta: vec![0.0; t * hv],
            gate: vec![0.0; t * hv],
            o_heads: vec![0.0; t * inner],
            o: vec![0.0; t * inner],
            chunked: false,
            chunk: vec![ChunkScratch::new(cfg.ssm_head_dim); hv],
        }
    }
}

/// The taps of a causal conv: as the file stores them, `w[c][j]` (`k` per
/// channel), or transposed once for a prompt, `w[j][c]`, so that a tap's
/// weights over the channels are one contiguous row.
#[derive(Clone, Copy)]
pub(super) enum Taps<'a> {
    ByChannel(&'a [f32]),
    ByTap(&'a [f32]),
}

/// The causal conv sums of every channel for row `t` of `mixed`, over
/// concat(`window`, `mixed`), into `o`: ggml_ssm_conv as GCC compiles it —
/// the taps past the last whole 8 are fused multiply-adds (all of them for
/// K ≤ 8), earlier ones rounded products added in order. Tap by tap over the
/// whole row (each channel's sum in the same order, whichever layout the
/// taps come in), so the loops vectorise. The diffusion conv starts from it,
/// so zero right taps give the AR conv bit for bit.
#[inline(always)]
pub(super) fn left_taps_row(
    w: Taps,
    k: usize,
    window: &[f32],
    mixed: &[f32],
    ch: usize,
    t: usize,
    o: &mut [f32],
) {
    let hist = k - 1;
    let fused_from = k - k % 8;
    o.fill(0.0);
    for j in 0..k {
        let s = t + j; // row of concat(window, mixed)
        let x = if s < hist {
            &window[s * ch..(s + 1) * ch]
        } else {
            &mixed[(s - hist) * ch..(s - hist + 1) * ch]
        };
        let fused = j >= fused_from;
        match w {
            Taps::ByChannel(w) => add_tap(o, x, w.chunks_exact(k).map(|wc| wc[j]), fused),
            Taps::ByTap(w) => add_tap(o, x, w[j * ch..(j + 1) * ch].iter().copied(), fused),
        }
    }
}

/// `o[c] += x[c]·w_c` for every channel, fused or a rounded product added.
#[inline(always)]
fn add_tap(o: &mut [f32], x: &[f32], taps: impl Iterator<Item = f32>, fused: bool) {
    if fused {
        for ((oc, &xc), wj) in o.iter_mut().zip(x).zip(taps) {
            *oc = xc.mul_add(wj, *oc);
        }
    } else {
        for ((oc, &xc), wj) in o.iter_mut().zip(x).zip(taps) {
            *oc += xc * wj;
        }
    }
}

/// Causal depthwise conv of `t` tokens of `mixed` with taps `w[c][j]`
/// (`j = K−1` multiplies the current token), then silu; advances `window`.
/// Several tokens are split across the pool (each row as alone). The taps
/// may also be given transposed (`wt`, [`by_tap`] of `w`, as the weights keep
/// them; empty: transposed here when several rows want them): contiguous
/// loads, the same sums.
pub fn conv_silu_t(
    w: &[f32],
    wt: &[f32],
    k: usize,
    window: &mut [f32],
    mixed: &[f32],
    ch: usize,
    out: &mut [f32],
) {
    let t_n = mixed.len() / ch;
    let out = &mut out[..t_n * ch];
    let own;
    let taps = if !wt.is_empty() {
        Taps::ByTap(wt)
    } else if t_n > 1 {
        own = by_tap(w, k, ch);
        Taps::ByTap(&own)
    } else {
        Taps::ByChannel(w)
    };
    let conv = CausalConv {
        taps,
        k,
        window,
        mixed,
        ch,
    };
    split_rows(out, t_n, ch, |t0, o| conv_silu_rows(&conv, t0, o));
    push_window(window, mixed, ch);
}

super::ops::fma_dispatch!(
    /// Rows `t0..` of [`conv_silu_t`] (as many as `out` holds), `window`
    /// not advanced.
    fn conv_silu_rows(c: &CausalConv, t0: usize, out: &mut [f32]) => conv_silu_rows_body
);

/// A causal conv's inputs: the taps (`k` per channel), the window of the
/// rows before `mixed`, `ch` channels.
#[derive(Clone, Copy)]
struct CausalConv<'a> {
    taps: Taps<'a>,
    k: usize,
    window: &'a [f32],
    mixed: &'a [f32],
    ch: usize,
}

#[inline(always)]
fn conv_silu_rows_body(c: &CausalConv, t0: usize, out: &mut [f32]) {
    let CausalConv {
        taps,
        k,
        window,
        mixed,
        ch,
    } = *c;
    for (i, o) in out.chunks_exact_mut(ch).enumerate() {
        left_taps_row(taps, k, window, mixed, ch, t0 + i, o);
        silu_row(o);
    }
}

/// `window ← the last K−1 rows of concat(window, mixed)` (rows of `ch`).
pub fn push_window(window: &mut [f32], mixed: &[f32], ch: usize) {
    let hist = window.len() / ch;
    let t_n = mixed.len() / ch;
    if t_n >= hist {
        window.copy_from_slice(&mixed[(t_n - hist) * ch..t_n * ch]);
    } else {
        window.copy_within(t_n * ch.., 0);
        let keep = (hist - t_n) * ch;
        window[keep..].copy_from_slice(&mixed[..t_n * ch]);
    }
}

/// One token of the gated delta rule for one value head.
/// `s` is `[d_v][d_k]` (`s[j][i] = S[i][j]`); `q` already L2-normalised
/// (the `1/√d_k` read-out scale is `scale`).
#[inline]
#[allow(clippy::too_many_arguments)]
pub fn delta_step(
    kt: &KernelTable,
    s: &mut [f32],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: f32,
    beta: f32,
    scale: f32,
    out: &mut [f32],
) {
    let dk = k.len();
    let decay = g.exp();
    // The tier's interleaved row step where it has one (the same bits).
    if let Some(rows) = kt.delta_rows() {
        rows(s, q, k, v, decay, beta, scale, out);
        return;
    }
    for (j, row) in s.chunks_exact_mut(dk).enumerate() {
        // Rows are independent: decay, predict, correct, read out.
        let delta = (v[j] - decay_and_predict(kt, row, k, decay)) * beta;
        axpy(row, k, delta);
        out[j] = dot_f32(kt, row, q) * scale;
    }
}

/// `row ← e^g · row`, returning `row · k` (the prediction m_j), in ggml's
/// order (`ggml_vec_scale_f32`, then `ggml_vec_dot_f32`).
#[inline(always)]
fn decay_and_predict(kt: &KernelTable, row: &mut [f32], k: &[f32], decay: f32) -> f32 {
    for si in row.iter_mut() {
        *si *= decay;
    }
    dot_f32(kt, row, k)
}

/// `row += a · k`, fused as ggml's `ggml_vec_mad_f32`.
#[inline(always)]
fn axpy(row: &mut [f32], k: &[f32], a: f32) {
    mad_f32(row, k, a);
}

/// The state update of `delta_step` without the read-out: bit-identical
/// state, used to replay stashed positions (always inlined, so that the
/// replay's AVX2 entry point compiles it for AVX2).
#[inline(always)]
pub fn delta_update(kt: &KernelTable, s: &mut [f32], k: &[f32], v: &[f32], g: f32, beta: f32) {
    let dk = k.len();
    let decay = g.exp();
    if let Some(rows) = kt.delta_rows() {
        rows(s, &[], k, v, decay, beta, 0.0, &mut []);
        return;
    }
    for (j, row) in s.chunks_exact_mut(dk).enumerate() {
        let delta = (v[j] - decay_and_predict(kt, row, k, decay)) * beta;
        axpy(row, k, delta);
    }
}

/// The GDN mixer over `t` tokens of normed input `u` (`[t][n_embd]`), writing
/// `out` (`[t][n_embd]`) and advancing `state`. With `stash`, also records
/// what `advance` needs to replay the recurrence later (docs/DESIGN.md §5).
///
/// With `ssm_from` (a verify pass's real state, `state` its scratch), the
/// parallel delta rule copies each head's slice into `state.ssm` just before
/// that head's first step: the copy is spread over the threads and leaves
/// the head's state in cache for its steps, where one large copy on the
/// driving thread made every verify pass wait for it. The same values
/// either way.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    cx: Cx,
    w: &DeltaNetWeights,
    state: &mut DeltaNetState,
    ssm_from: Option<&[f32]>,
    u: &[f32],
    t: usize,
    sc: &mut DeltaNetScratch,
    lin: &mut MatScratch,
    out: &mut [f32],
    stash: Option<&mut GdnStash>,
) {
    let Cx { kt, cfg, .. } = cx;
    project(cx, w, u, t, sc, lin);
    recur(kt, cfg, w, state, ssm_from, t, sc, stash);
    finish(cx, w, t, sc, lin, out);
}

/// Step 1: the input projections of `t` rows into `sc` (`mixed`, `z`, and
/// the raw `beta` and `alpha` rows in `beta` / `gate`); u converted once per
/// dot type.
pub(super) fn project(
    cx: Cx,
    w: &DeltaNetWeights,
    u: &[f32],
    t: usize,
    sc: &mut DeltaNetScratch,
    lin: &mut MatScratch,
) {
    let Cx { kt, mode, cfg } = cx;
    let ch = cfg.ssm_conv_channels();
    let inner = cfg.ssm_inner();
    let hv = cfg.ssm_n_v_heads;
    let _p = observe::enter(Op::GdnProj);
    lin.new_input();
    lin.project(kt, mode, &w.qkv, u, &mut sc.mixed[..t * ch]);
    lin.project(kt, mode, &w.gate, u, &mut sc.z[..t * inner]);
    lin.project(kt, mode, &w.beta, u, &mut sc.beta[..t * hv]);
    lin.project(kt, mode, &w.alpha, u, &mut sc.gate[..t * hv]);
    if observe::wants_tensors() {
        observe::here("linear_attn_qkv_mixed", t, &sc.mixed[..t * ch]);
        observe::here("z", t, &sc.z[..t * inner]);
        observe::here("beta", t, &sc.beta[..t * hv]);
        observe::here("alpha", t, &sc.gate[..t * hv]);
    }
}

/// Steps 2–5 over the `t` projected rows in `sc`: gates, the causal conv
/// (advancing `state.conv`), q/k norms and the delta rule (advancing
/// `state.ssm`), leaving the heads' outputs in `sc.o_heads` (`[n_v][t][d]`).
#[allow(clippy::too_many_arguments)]
pub(super) fn recur(
    kt: &KernelTable,
    cfg: &ModelConfig,
    w: &DeltaNetWeights,
    state: &mut DeltaNetState,
    ssm_from: Option<&[f32]>,
    t: usize,
    sc: &mut DeltaNetScratch,
    stash: Option<&mut GdnStash>,
) {
    let ch = cfg.ssm_conv_channels();
    let (hv, hk, d) = (cfg.ssm_n_v_heads, cfg.ssm_n_k_heads, cfg.ssm_head_dim);
    // 2. Gates.
    let _p = observe::enter(Op::Recurrence);
    observe::bytes((state.conv.len() + state.ssm.len()) * size_of::<f32>());
    for b in &mut sc.beta[..t * hv] {
        *b = sigmoid(*b);
    }
    decay_gates(w, &mut sc.gate[..t * hv]);

    // 3. Causal conv + silu.
    {
        let _p = observe::enter(Op::Conv);
        conv_silu_t(
            &w.conv,
            &w.conv_t,
            cfg.ssm_conv_kernel,
            &mut state.conv,
            &sc.mixed[..t * ch],
            ch,
            &mut sc.conv[..t * ch],
        );
    }

    observe::here("conv_output_silu", t, &sc.conv[..t * ch]);
    // 4. L2-normalise q and k heads.
    l2norm_qk(cfg, &mut sc.conv[..t * ch]);

    if let Some(st) = stash {
        st.record(cfg, t, &sc.mixed, &sc.conv, &sc.gate, &sc.beta);
    }

    // 5. Delta rule, value heads in parallel (token by token, or chunked).
    let scale = 1.0 / (d as f32).sqrt();
    let (conv, beta, gate) = (&sc.conv, &sc.beta, &sc.gate);
    if sc.chunked && t > 1 {
        state
            .ssm
            .par_chunks_mut(d * d)
            .zip(sc.o_heads[..hv * t * d].par_chunks_mut(t * d))
            .zip(sc.chunk.par_iter_mut())
            .enumerate()
            .for_each(|(h, ((s, oh), cs))| {
                if let Some(src) = ssm_from {
                    s.copy_from_slice(&src[h * d * d..(h + 1) * d * d]);
                }
                let kh = h % hk;
                let x = HeadInputs {
                    rows: &conv[..t * ch],
                    stride: ch,
                    q_off: kh * d,
                    k_off: (hk + kh) * d,
                    v_off: 2 * hk * d + h * d,
                    gate,
                    beta,
                    gstride: hv,
                    h,
                    d,
                };
                chunked::head(s, &x, t, scale, cs, oh);
            });
    } else {
        // Rows `r` of head `h` from `from` (else `s`).
        let rows =
            |h: usize, s: &mut [f32], from: Option<&[f32]>, r: Range<usize>, oh: &mut [f32]| {
                if r.len() > 1 && head_steps(kt, cfg, s, from, conv, gate, beta, h, &r, scale, oh) {
                    return;
                }
                if let Some(src) = from {
                    s.copy_from_slice(src);
                }
                let kh = h % hk;
                for ti in r {
                    let row = &conv[ti * ch..(ti + 1) * ch];
                    let q = &row[kh * d..(kh + 1) * d];
                    let k = &row[(hk + kh) * d..(hk + kh + 1) * d];
                    let v = &row[2 * hk * d + h * d..2 * hk * d + (h + 1) * d];
                    let o = &mut oh[ti * d..(ti + 1) * d];
                    delta_step(
                        kt,
                        s,
                        q,
                        k,
                        v,
                        gate[ti * hv + h],
                        beta[ti * hv + h],
                        scale,
                        o,
                    );
                }
            };
        let from = |h: usize| ssm_from.map(|src| &src[h * d * d..(h + 1) * d * d]);
        state
            .ssm
            .par_chunks_mut(d * d)
            .zip(sc.o_heads[..hv * t * d].par_chunks_mut(t * d))
            .enumerate()
            .for_each(|(h, (s, oh))| rows(h, s, from(h), 0..t, oh));
    }

    observe::here("attn_output", t, &sc.o_heads[..hv * t * d]);
    observe::here("gate", t, &sc.gate[..t * hv]);
}

/// Several tokens of value head `h` through the tier's multi-position
/// kernel ([`KernelTable::delta_steps`]): the head's state rows stay in
/// registers across the tokens, and a verify pass (`from`, the real state)
/// reads them from there and never writes them back (the scratch `s` is
/// dropped after the pass; the commit replays the stash). The bits of
/// [`delta_step`] token by token. `false`, nothing done, where the tier has
/// no such kernel or refuses the shape.
#[allow(clippy::too_many_arguments)]
fn head_steps(
    kt: &KernelTable,
    cfg: &ModelConfig,
    s: &mut [f32],
    from: Option<&[f32]>,
    conv: &[f32],
    gate: &[f32],
    beta: &[f32],
    h: usize,
    r: &Range<usize>,
    scale: f32,
    oh: &mut [f32],
) -> bool {
    let Some(steps_fn) = kt.delta_steps() else {
        return false;
    };
    let (ch, hv, hk, d) = (
        cfg.ssm_conv_channels(),
        cfg.ssm_n_v_heads,
        cfg.ssm_n_k_heads,
        cfg.ssm_head_dim,
    );
    let kh = h % hk;
    let step = |ti: usize| {
        let row = &conv[ti * ch..(ti + 1) * ch];
        ReplayStep {
            q: &row[kh * d..(kh + 1) * d],
            k: &row[(hk + kh) * d..(hk + kh + 1) * d],
            v: &row[2 * hk * d + h * d..2 * hk * d + (h + 1) * d],
            decay: gate[ti * hv + h].exp(),
            beta: beta[ti * hv + h],
        }
    };
    const CHUNK: usize = 16;
    let mut done = r.start;
    while done < r.end {
        let m = CHUNK.min(r.end - done);
        let steps: [ReplayStep; CHUNK] = std::array::from_fn(|i| step(done + i.min(m - 1)));
        // The first chunk starts from `from`; the rows are stored unless this
        // is a verify pass's last chunk.
        let src = if done == r.start { from } else { None };
        let store = from.is_none() || done + m < r.end;
        let o = &mut oh[done * d..(done + m) * d];
        if !steps_fn(s, src, store, &steps[..m], scale, o) {
            // Every chunk has the same shapes: refused at once or never.
            assert_eq!(done, r.start, "delta steps refused a later chunk");
            return false;
        }
        done += m;
    }
    true
}

/// Step 6: the gated RMSNorm of the heads' outputs and `sc.z`, then the
/// output projection of `t` rows into `out`.
pub(super) fn finish(
    cx: Cx,
    w: &DeltaNetWeights,
    t: usize,
    sc: &mut DeltaNetScratch,
    lin: &mut MatScratch,
    out: &mut [f32],
) {
    let Cx { cfg, .. } = cx;
    {
        let _p = observe::enter(Op::Norm);
        gated_norm(cfg, w, t, &sc.o_heads, &mut sc.z, &mut sc.o);
    }
    observe::here("final_output", t, &sc.o[..t * cfg.ssm_inner()]);
    project_out(cx, w, t, &sc.o, lin, out);
}

/// `out = ssm_out · o` for `t` rows of the gated-norm output `o` (`[t][inner]`).
pub(super) fn project_out(
    cx: Cx,
    w: &DeltaNetWeights,
    t: usize,
    o: &[f32],
    lin: &mut MatScratch,
    out: &mut [f32],
) {
    let Cx { kt, mode, cfg } = cx;
    lin.new_input();
    let _p = observe::enter(Op::GdnProj);
    lin.project(
        kt,
        mode,
        &w.out,
        &o[..t * cfg.ssm_inner()],
        &mut out[..t * cfg.n_embd],
    );
}

/// `g = softplus(a + dt_bias) · ssm_a` in place over rows `[T][n_v]` of the
/// `ssm_alpha` projection (docs/DESIGN.md §2.1 step 2; the decay is `e^g`).
pub(super) fn decay_gates(w: &DeltaNetWeights, g: &mut [f32]) {
    for gt in g.chunks_exact_mut(w.a.len()) {
        for ((g, &dt), &a) in gt.iter_mut().zip(&w.dt_bias).zip(&w.a) {
            *g = softplus(*g + dt) * a;
        }
    }
}

/// L2-normalises every q and k head of the post-conv rows `[T][channels]`
/// (q heads, then k heads, then v; v is left as is).
pub(super) fn l2norm_qk(cfg: &ModelConfig, conv: &mut [f32]) {
    let (hk, d) = (cfg.ssm_n_k_heads, cfg.ssm_head_dim);
    let norm = |row: &mut [f32]| {
        for head in row[..2 * hk * d].chunks_exact_mut(d) {
            l2norm_inplace(head, cfg.rms_eps);
        }
    };
    let ch = cfg.ssm_conv_channels();
    if conv.len() > ch && conv.len() >= PAR_MIN_ELEMS {
        conv.par_chunks_exact_mut(ch).for_each(norm);
    } else {
        conv.chunks_exact_mut(ch).for_each(norm);
    }
}

/// The gated RMSNorm (docs/DESIGN.md §2.1 step 6) of `t` rows:
/// `o[t][h] = rmsnorm(o_heads[h][t]) ⊙ ssm_norm ⊙ silu(z[t][h])`, with
/// `o_heads` head-major `[n_v][t][d]`, `z` and `o` `[t][inner]`. `z` is
/// replaced by silu(z): ggml takes silu per row of d_v
/// (`ggml_vec_silu_f32`), then multiplies.
pub(super) fn gated_norm(
    cfg: &ModelConfig,
    w: &DeltaNetWeights,
    t: usize,
    o_heads: &[f32],
    z: &mut [f32],
    o: &mut [f32],
) {
    let (hv, d) = (cfg.ssm_n_v_heads, cfg.ssm_head_dim);
    let inner = cfg.ssm_inner();
    // Row ti of z and o (each row as alone, so rows may run in parallel).
    let row = |ti: usize, zr: &mut [f32], or: &mut [f32]| {
        for zh in zr.chunks_exact_mut(d) {
            silu_row(zh);
        }
        for h in 0..hv {
            let o_h = &o_heads[(h * t + ti) * d..(h * t + ti + 1) * d];
            let dst = &mut or[h * d..(h + 1) * d];
            rmsnorm(o_h, &w.norm, cfg.rms_eps, dst);
            for (x, &zi) in dst.iter_mut().zip(&zr[h * d..(h + 1) * d]) {
                *x *= zi;
            }
        }
    };
    let (z, o) = (&mut z[..t * inner], &mut o[..t * inner]);
    if t > 1 && z.len() >= PAR_MIN_ELEMS {
        z.par_chunks_exact_mut(inner)
            .zip(o.par_chunks_exact_mut(inner))
            .enumerate()
            .for_each(|(ti, (zr, or))| row(ti, zr, or));
    } else {
        for (ti, (zr, or)) in z
            .chunks_exact_mut(inner)
            .zip(o.chunks_exact_mut(inner))
            .enumerate()
        {
            row(ti, zr, or);
        }
    }
}

#[cfg(test)]
#[path = "deltanet_tests.rs"]
pub(crate) mod tests;
