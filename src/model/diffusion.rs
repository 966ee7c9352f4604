//! The block-diffusion forward (docs/DESIGN.md §3, normative): the AR forward over a
//! draft block `[t_n, M, …, M]` at positions n … n+D with the committed state
//! read but never written.
//!
//! ```text
//! attention:  q_i attends to cached positions < n and to every block
//!             position (bidirectional); block K/V are not stored
//! GDN (prefix state S, conv window W from position n−1, both read only):
//!   c_i   = silu(Σ_{j<K} w[j]·mixed_{i−K+1+j} + Σ_{j<K_r} w_r[j]·mixed_{i+1+j})
//!           (rows before the block from W, rows past index D are 0)
//!   q̂, k̂  = L2(q), L2(k);  q = q̂/√d
//!   o_hist = Sᵀ q                                  (no decay, no update)
//!   o_blk  = Σ_j softmax_j(s_h · q̂_i·k̂_j) v_j        (over the whole block)
//!   λ      = σ(w_h·g_{i,h} + b_h);  o = λ·o_hist + (1−λ)·o_blk
//!   out    = ssm_out · concat_h(rmsnorm(o_h) ⊙ ssm_norm ⊙ silu(z_h))
//! norms, MoE and the output head as in the AR pass
//! ```
//! Logits are shifted: the row of block index j predicts position n+j+1.
//!
//! Only what docs/DESIGN.md §3 changes is here: the two-sided conv, the history
//! read-out, the block softmax and its mix with the history, and the
//! attention span. The rest are the AR pass's own stages, called with the
//! state's scratch: q/k norms and rope, the attend step (`Span::Block`) and
//! the projections of `attention.rs`; the decay gates, q/k L2 norms and the
//! gated RMSNorm of `deltanet.rs`; batch checks, norms, MoE and the output
//! head of `forward.rs`. The GDN block buffers (`GdnBlockScratch`) are
//! allocated once per call (a block is ≤ 16 tokens).

use rayon::prelude::*;

use super::config::ModelConfig;
use super::cx::Cx;
use super::deltanet::{self, decay_gates, gated_norm, l2norm_qk, left_taps_row, Taps};
use super::linear::MatScratch;
use super::observe::{self, Op};
use super::ops::{by_tap, sigmoid, silu_row, softmax_inplace, split_rows};
use super::state::DeltaNetState;
use super::weights::{DeltaNetWeights, DiffusionWeights};

/// Buffers of a diffusion GDN layer (`t` block positions).
#[derive(Debug)]
pub struct GdnBlockScratch {
    /// `[t][channels]` pre-conv projections, then `[t][channels]` post-conv
    /// with q̂ and k̂ L2-normalised (q not yet scaled).
    pub mixed: Vec<f32>,
    pub conv: Vec<f32>,
    /// `[t][inner]` output gate; `[t][n_v]` decay g.
    pub z: Vec<f32>,
    pub g: Vec<f32>,
    /// `[n_v][t]` one query row's block softmax weights, per value head.
    a: Vec<f32>,
    /// `[n_v][d]` one query row's block read-out o_blk, per value head.
    blk: Vec<f32>,
    /// `[n_v][t][d]` mixed read-outs o (before the gated norm).
    pub o_heads: Vec<f32>,
    /// `[t][inner]` gated-norm output.
    pub o: Vec<f32>,
    /// Test knob: replace λ by this value.
    pub force_lambda: Option<f32>,
}

impl GdnBlockScratch {
    pub fn new(cfg: &ModelConfig, t: usize) -> GdnBlockScratch {
        let ch = cfg.ssm_conv_channels();
        let inner = cfg.ssm_inner();
        GdnBlockScratch {
            mixed: vec![0.0; t * ch],
            conv: vec![0.0; t * ch],
            z: vec![0.0; t * inner],
            g: vec![0.0; t * cfg.ssm_n_v_heads],
            a: vec![0.0; cfg.ssm_n_v_heads * t],
            blk: vec![0.0; cfg.ssm_inner()],
            o_heads: vec![0.0; t * inner],
            o: vec![0.0; t * inner],
            force_lambda: None,
        }
    }
}

/// Two-sided depthwise conv of the `t` rows of `mixed` (then silu): left taps
/// `w[c][j]` over the window rows (oldest first) and the block, right taps
/// `wr[c][j]` over rows i+1+j of the block (0 past its end).
#[allow(clippy::too_many_arguments)]
pub fn conv_two_sided(
    w: &[f32],
    k: usize,
    wr: &[f32],
    kr: usize,
    window: &[f32],
    mixed: &[f32],
    ch: usize,
    out: &mut [f32],
) {
    conv_two_sided_t([w, &[]], k, [wr, &[]], kr, window, mixed, ch, out);
}

/// [`conv_two_sided`] with each set of taps also given transposed
/// (`[w, wt]`, `wt` = [`by_tap`] of `w`, as the weights keep them; empty:
/// transposed here when several rows want them). The same sums.
#[allow(clippy::too_many_arguments)]
pub fn conv_two_sided_t(
    [w, wt]: [&[f32]; 2],
    k: usize,
    [wr, wrt]: [&[f32]; 2],
    kr: usize,
    window: &[f32],
    mixed: &[f32],
    ch: usize,
    out: &mut [f32],
) {
    let t_n = mixed.len() / ch;
    let out = &mut out[..t_n * ch];
    // Several rows: both sets of taps transposed once, for contiguous loads
    // (the same sums in the same order), unless the caller has them.
    let (own, own_r);
    let (wt, wrt) = if t_n > 1 && (wt.is_empty() || wrt.is_empty()) {
        (own, own_r) = (by_tap(w, k, ch), by_tap(wr, kr, ch));
        (&own[..], &own_r[..])
    } else {
        (wt, wrt)
    };
    let taps = ConvTaps {
        w: pick(w, wt),
        k,
        wr: pick(wr, wrt),
        kr,
        window,
        mixed,
        ch,
    };
    // Rows in parallel, as the AR conv: each row reads only `mixed`.
    split_rows(out, t_n, ch, |t0, o| two_sided_rows(&taps, t0, o));
}

/// `t` (taps transposed by [`by_tap`]) where it is not empty, else `w`.
fn pick<'a>(w: &'a [f32], t: &'a [f32]) -> Taps<'a> {
    match t.is_empty() {
        true => Taps::ByChannel(w),
        false => Taps::ByTap(t),
    }
}

/// What every row of [`conv_two_sided`] reads.
struct ConvTaps<'a> {
    w: Taps<'a>,
    k: usize,
    wr: Taps<'a>,
    kr: usize,
    window: &'a [f32],
    mixed: &'a [f32],
    ch: usize,
}

super::ops::fma_dispatch!(
    /// Rows `t0..` of [`conv_two_sided`] (as many as `out` holds). With FMA
    /// enabled the left taps' fused multiply-adds are instructions, not
    /// calls to the library `fmaf` (the same correctly rounded result).
    fn two_sided_rows(c: &ConvTaps, t0: usize, out: &mut [f32]) => two_sided_rows_body
);

#[inline(always)]
fn two_sided_rows_body(c: &ConvTaps, t0: usize, out: &mut [f32]) {
    let ConvTaps {
        w,
        k,
        wr,
        kr,
        window,
        mixed,
        ch,
    } = *c;
    let t_n = mixed.len() / ch;
    for (r, o) in out.chunks_exact_mut(ch).enumerate() {
        let i = t0 + r;
        // The AR conv's left taps, so zero right taps give it bit for bit.
        left_taps_row(w, k, window, mixed, ch, i, o);
        // Right taps j = 0, 1, … added to each channel in that order; a
        // row past the block's end adds 0·w as a present row would.
        for j in 0..kr {
            let s = i + 1 + j;
            let x = (s < t_n).then(|| &mixed[s * ch..(s + 1) * ch]);
            match wr {
                Taps::ByChannel(wr) => right_tap(o, x, wr.chunks_exact(kr).map(|wc| wc[j])),
                Taps::ByTap(wr) => right_tap(o, x, wr[j * ch..(j + 1) * ch].iter().copied()),
            }
        }
        silu_row(o);
    }
}

/// `o[c] += x[c]·w_c` for every channel, or `0·w_c` where the row is past
/// the block (`x` none).
#[inline(always)]
fn right_tap(o: &mut [f32], x: Option<&[f32]>, taps: impl Iterator<Item = f32>) {
    match x {
        Some(x) => {
            for ((oc, &xc), wj) in o.iter_mut().zip(x).zip(taps) {
                *oc += xc * wj;
            }
        }
        None => {
            for (oc, wj) in o.iter_mut().zip(taps) {
                *oc += 0.0 * wj;
            }
        }
    }
}

/// The diffusion GDN mixer over `t` block rows of normed input `u`, reading
/// (never writing) `state`; writes `out` (`[t][n_embd]`).
#[allow(clippy::too_many_arguments)]
pub fn gdn_block(
    cx: Cx,
    w: &DeltaNetWeights,
    dw: &DiffusionWeights,
    state: &DeltaNetState,
    u: &[f32],
    t: usize,
    sc: &mut GdnBlockScratch,
    lin: &mut MatScratch,
    out: &mut [f32],
) {
    let Cx { kt, mode, cfg } = cx;
    let ch = cfg.ssm_conv_channels();
    let inner = cfg.ssm_inner();
    let hv = cfg.ssm_n_v_heads;

    // 1. Projections and g (β is not used by the block pass).
    let p = observe::enter(Op::GdnProj);
    lin.new_input();
    lin.project(kt, mode, &w.qkv, u, &mut sc.mixed[..t * ch]);
    lin.project(kt, mode, &w.gate, u, &mut sc.z[..t * inner]);
    lin.project(kt, mode, &w.alpha, u, &mut sc.g[..t * hv]);
    drop(p);
    block_conv(cfg, w, dw, &state.conv, t, sc);
    block_heads(cfg, dw, Some(&state.ssm), t, sc);

    // 6. Gated RMSNorm (the AR pass's), then the output projection.
    {
        let _p = observe::enter(Op::Norm);
        gated_norm(cfg, w, t, &sc.o_heads, &mut sc.z, &mut sc.o);
    }
    deltanet::project_out(cx, w, t, &sc.o, lin, out);
}

/// Steps 1 (the decay g) and 2 of [`gdn_block`] on the `t` projected rows in
/// `sc` (`mixed`, and the raw `ssm_alpha` rows in `g`): the two-sided conv
/// over `window` (the prefix's conv window), silu, q/k L2 norms.
pub(super) fn block_conv(
    cfg: &ModelConfig,
    w: &DeltaNetWeights,
    dw: &DiffusionWeights,
    window: &[f32],
    t: usize,
    sc: &mut GdnBlockScratch,
) {
    let ch = cfg.ssm_conv_channels();
    let p = observe::enter(Op::Recurrence);
    decay_gates(w, &mut sc.g[..t * cfg.ssm_n_v_heads]);
    drop(p);
    let _p = observe::enter(Op::Conv);
    conv_two_sided_t(
        [&w.conv, &w.conv_t],
        cfg.ssm_conv_kernel,
        [&dw.conv_right, &dw.conv_right_t],
        dw.k_right,
        window,
        &sc.mixed[..t * ch],
        ch,
        &mut sc.conv[..t * ch],
    );
    l2norm_qk(cfg, &mut sc.conv[..t * ch]);
}

/// Steps 3–5 of [`gdn_block`], value heads in parallel, into `sc.o_heads`:
/// the history read-out from the prefix state `ssm` (none: already in
/// `sc.o_heads`, as a fused pass reads it), the block softmax, the mix.
pub(super) fn block_heads(
    cfg: &ModelConfig,
    dw: &DiffusionWeights,
    ssm: Option<&[f32]>,
    t: usize,
    sc: &mut GdnBlockScratch,
) {
    let (hv, d) = (cfg.ssm_n_v_heads, cfg.ssm_head_dim);
    let _p = observe::enter(Op::Recurrence);
    let ctx = BlockHeads {
        cfg,
        dw,
        ssm,
        conv: &sc.conv,
        g: &sc.g,
        force: sc.force_lambda,
        t,
    };
    sc.o_heads[..hv * t * d]
        .par_chunks_mut(t * d)
        .zip(sc.a[..hv * t].par_chunks_mut(t))
        .zip(sc.blk[..hv * d].par_chunks_mut(d))
        .enumerate()
        .for_each(|(h, ((oh, a), blk))| block_head(&ctx, h, oh, a, blk));
}

/// What every value head of [`gdn_block`]'s steps 3–5 reads.
struct BlockHeads<'a> {
    cfg: &'a ModelConfig,
    dw: &'a DiffusionWeights,
    /// The prefix state (none: the history read-out is done).
    ssm: Option<&'a [f32]>,
    conv: &'a [f32],
    g: &'a [f32],
    force: Option<f32>,
    t: usize,
}

super::ops::fma_dispatch!(
    /// Steps 3–5 of [`gdn_block`] for value head `h`: `oh` its `[t][d]`
    /// outputs, `a` and `blk` its scratch. With FMA (and so AVX2) enabled
    /// the sixteen lanes of [`dot_lanes`] are two vector registers; the
    /// arithmetic is the same (no contraction), so the same bits.
    fn block_head(
        ctx: &BlockHeads,
        h: usize,
        oh: &mut [f32],
        a: &mut [f32],
        blk: &mut [f32]
    ) => block_head_body
);

#[inline(always)]
fn block_head_body(ctx: &BlockHeads, h: usize, oh: &mut [f32], a: &mut [f32], blk: &mut [f32]) {
    let d = ctx.cfg.ssm_head_dim;
    if let Some(ssm) = ctx.ssm {
        hist_readout(
            ctx.cfg,
            &ssm[h * d * d..(h + 1) * d * d],
            ctx.conv,
            h,
            ctx.t,
            oh,
        );
    }
    block_mix(ctx, h, oh, a, blk);
}

/// Step 3 of [`gdn_block`] for value head `h`: `oh[i][jv] = Σ_a S[a][jv]·q_i[a]`
/// (scaled) for the `t` post-conv block rows in `conv`, from the head's state
/// `s` (`[d_v][d_k]`): row jv of the state against every row's q, so the
/// head's state is read once. A fused verify + draft pass calls it inside the
/// verify rows' delta rule, when the state is the prefix's.
#[inline(always)]
pub(super) fn hist_readout(
    cfg: &ModelConfig,
    s: &[f32],
    conv: &[f32],
    h: usize,
    t: usize,
    oh: &mut [f32],
) {
    let ch = cfg.ssm_conv_channels();
    let (hk, d) = (cfg.ssm_n_k_heads, cfg.ssm_head_dim);
    let scale = 1.0 / (d as f32).sqrt();
    let kh = h % hk;
    let q_of = |i: usize| &conv[i * ch + kh * d..i * ch + (kh + 1) * d];
    for jv in 0..d {
        let srow = &s[jv * d..(jv + 1) * d];
        for i in 0..t {
            oh[i * d + jv] = dot_lanes(srow, q_of(i)) * scale;
        }
    }
}

/// Steps 4–5 of [`gdn_block`] for value head `h`, with the history read-out
/// already in `oh`: the block softmax, its read-out and the mix.
#[inline(always)]
fn block_mix(ctx: &BlockHeads, h: usize, oh: &mut [f32], a: &mut [f32], blk: &mut [f32]) {
    let cfg = ctx.cfg;
    let (dw, conv, g) = (ctx.dw, ctx.conv, ctx.g);
    let ch = cfg.ssm_conv_channels();
    let (hv, hk, d) = (cfg.ssm_n_v_heads, cfg.ssm_n_k_heads, cfg.ssm_head_dim);
    let kh = h % hk;
    let q_of = |i: usize| &conv[i * ch + kh * d..i * ch + (kh + 1) * d];
    let k_of = |i: usize| &conv[i * ch + (hk + kh) * d..i * ch + (hk + kh + 1) * d];
    let v_of = |i: usize| &conv[i * ch + 2 * hk * d + h * d..i * ch + 2 * hk * d + (h + 1) * d];
    for (i, o) in oh.chunks_exact_mut(d).enumerate() {
        let q = q_of(i);
        for (j, aj) in a.iter_mut().enumerate() {
            *aj = dw.logit_scale[h] * dot_lanes(q, k_of(j));
        }
        softmax_inplace(a);
        let lambda = ctx
            .force
            .unwrap_or_else(|| sigmoid(dw.history_w[h] * g[i * hv + h] + dw.history_b[h]));
        // o_blk = Σ_j a_j·v_j, each element summed over j in order.
        blk.fill(0.0);
        for (j, &aj) in a.iter().enumerate() {
            for (bv, &vv) in blk.iter_mut().zip(v_of(j)) {
                *bv += aj * vv;
            }
        }
        for (oj, &b) in o.iter_mut().zip(blk.iter()) {
            *oj = lambda * *oj + (1.0 - lambda) * b;
        }
    }
}

/// Lanes of [`dot_lanes`].
pub const DOT_LANES: usize = 16;

/// `a · b` in the block pass's order (its history read-out and block
/// scores): lane `l` sums the products at indices `≡ l (mod 16)` in index
/// order, then the lanes are added pairwise, lane `l` with `l + w` for
/// `w = 8, 4, 2, 1`. Sixteen independent sums, where one running sum was a
/// chain of dependent adds (the read-out alone is `t·d²` products per head
/// and layer). On x86-64 with AVX the lanes are two 8-wide registers and the
/// halving tree is done in registers (the same adds, lane for lane).
#[inline]
pub fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if kernels::cpu::has_fma() {
        // SAFETY: FMA (which implies AVX) was detected on this host.
        return unsafe { dot_lanes_avx(a, b) };
    }
    dot_lanes_portable(a, b)
}

/// [`dot_lanes`] in plain Rust (what the AVX version must equal bit for bit).
#[inline(always)]
fn dot_lanes_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut l = [0f32; DOT_LANES];
    let (ca, cb) = (a.chunks_exact(DOT_LANES), b.chunks_exact(DOT_LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..DOT_LANES {
            l[i] += x[i] * y[i];
        }
    }
    for (i, (x, y)) in ra.iter().zip(rb).enumerate() {
        l[i] += x * y;
    }
    halve_lanes(&mut l)
}

/// The halving tree: lane `l` += lane `l + w` for `w = 8, 4, 2, 1`.
#[inline(always)]
fn halve_lanes(l: &mut [f32; DOT_LANES]) -> f32 {
    let mut w = DOT_LANES / 2;
    while w > 0 {
        for i in 0..w {
            l[i] += l[i + w];
        }
        w /= 2;
    }
    l[0]
}

/// # Safety
/// The host must have AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn dot_lanes_avx(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let full = n - n % DOT_LANES;
    // SAFETY: every load reads 8 floats below `full` ≤ both lengths.
    unsafe {
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        while i < full {
            let x = _mm256_mul_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)));
            lo = _mm256_add_ps(lo, x);
            let y = _mm256_mul_ps(
                _mm256_loadu_ps(pa.add(i + 8)),
                _mm256_loadu_ps(pb.add(i + 8)),
            );
            hi = _mm256_add_ps(hi, y);
            i += DOT_LANES;
        }
        if full < n {
            let mut l = [0f32; DOT_LANES];
            _mm256_storeu_ps(l.as_mut_ptr(), lo);
            _mm256_storeu_ps(l.as_mut_ptr().add(8), hi);
            for (j, (x, y)) in a[full..n].iter().zip(&b[full..n]).enumerate() {
                l[j] += x * y;
            }
            return halve_lanes(&mut l);
        }
        // w = 8, 4, 2, 1, lane for lane as `halve_lanes`.
        let s8 = _mm256_add_ps(lo, hi);
        let s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps::<1>(s8));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<1>(s2, s2));
        _mm_cvtss_f32(s1)
    }
}

/// Blocks of at least this many rows run on the prompt kernels: from there
/// on the prompt kernels' block costs less than the decode kernels' at full
/// size, below it more (`clover bench --pass-costs 8,16`;
/// docs/PERFORMANCE.md, "Kernel choices, measured").
pub const BLOCK_PROMPT_ROWS: usize = 16;

/// Test knobs of a diffusion pass.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiffusionKnobs {
    /// Replace every λ by this value.
    pub force_lambda: Option<f32>,
    /// Evaluate attention queries last to first.
    pub reverse_queries: bool,
    /// The mask rows' expert pool (`MoeScratch::pool`; 0: route freely).
    pub expert_pool: usize,
}

#[cfg(test)]
#[path = "diffusion_tests.rs"]
mod tests;
