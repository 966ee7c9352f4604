//! The block-diffusion forward (DESIGN §3, normative): the AR forward over a
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
//! Scratch for the block is allocated per call (a block is ≤ 16 tokens).

use kernels::KernelTable;
use rayon::prelude::*;

use super::config::ModelConfig;
use super::forward::{add_into, norm_rows, LogitsFor, Model};
use super::kv::KvCache;
use super::linear::MatScratch;
use super::ops::{
    l2norm_inplace, rmsnorm, rmsnorm_inplace, sigmoid, silu, silu_row, softmax_inplace,
};
use super::ops::{softplus, RopeCache};
use super::state::{DeltaNetState, LayerSlot, State};
use super::weights::{AttentionWeights, DeltaNetWeights, DiffusionWeights, MixerWeights};
use super::ForwardError;

/// Per-call buffers of a diffusion GDN layer (`t` block positions).
#[derive(Debug)]
pub struct GdnBlockScratch {
    /// `[t][channels]` pre-conv projections, then `[t][channels]` post-conv
    /// with q̂ and k̂ L2-normalised (q not yet scaled).
    pub mixed: Vec<f32>,
    pub conv: Vec<f32>,
    /// `[t][inner]` output gate; `[t][n_v]` decay g.
    pub z: Vec<f32>,
    pub g: Vec<f32>,
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
    let t_n = mixed.len() / ch;
    for i in 0..t_n {
        let o = &mut out[i * ch..(i + 1) * ch];
        // The AR conv's left taps, so zero right taps give it bit for bit.
        super::deltanet::left_taps_row(w, k, window, mixed, ch, i, o);
        for (c, oc) in o.iter_mut().enumerate() {
            let mut sum = *oc;
            for j in 0..kr {
                let s = i + 1 + j;
                let x = if s < t_n { mixed[s * ch + c] } else { 0.0 };
                sum += x * wr[c * kr + j];
            }
            *oc = sum;
        }
        silu_row(o);
    }
}

/// The diffusion GDN mixer over `t` block rows of normed input `u`, reading
/// (never writing) `state`; writes `out` (`[t][n_embd]`).
#[allow(clippy::too_many_arguments)]
pub fn gdn_block(
    kt: &KernelTable,
    cfg: &ModelConfig,
    w: &DeltaNetWeights,
    dw: &DiffusionWeights,
    state: &DeltaNetState,
    u: &[f32],
    t: usize,
    sc: &mut GdnBlockScratch,
    lin: &mut MatScratch,
    out: &mut [f32],
) {
    let ch = cfg.ssm_conv_channels();
    let inner = cfg.ssm_inner();
    let (hv, hk, d) = (cfg.ssm_n_v_heads, cfg.ssm_n_k_heads, cfg.ssm_head_dim);

    // 1. Projections and g (β is not used by the block pass).
    lin.new_input();
    lin.project(kt, &w.qkv, u, &mut sc.mixed[..t * ch]);
    lin.project(kt, &w.gate, u, &mut sc.z[..t * inner]);
    lin.project(kt, &w.alpha, u, &mut sc.g[..t * hv]);
    for gt in sc.g[..t * hv].chunks_exact_mut(hv) {
        for ((g, &dt), &a) in gt.iter_mut().zip(&w.dt_bias).zip(&w.a) {
            *g = softplus(*g + dt) * a;
        }
    }

    // 2. Two-sided conv + silu; L2-normalise q and k heads.
    conv_two_sided(
        &w.conv,
        cfg.ssm_conv_kernel,
        &dw.conv_right,
        dw.k_right,
        &state.conv,
        &sc.mixed[..t * ch],
        ch,
        &mut sc.conv[..t * ch],
    );
    for row in sc.conv[..t * ch].chunks_exact_mut(ch) {
        for head in row[..2 * hk * d].chunks_exact_mut(d) {
            l2norm_inplace(head, cfg.rms_eps);
        }
    }

    // 3.–5. History read-out, block softmax, mix; value heads in parallel.
    let scale = 1.0 / (d as f32).sqrt();
    let (conv, g, force) = (&sc.conv, &sc.g, sc.force_lambda);
    sc.o_heads[..hv * t * d]
        .par_chunks_mut(t * d)
        .enumerate()
        .for_each(|(h, oh)| {
            let kh = h % hk;
            let s = &state.ssm[h * d * d..(h + 1) * d * d];
            let q_of = |i: usize| &conv[i * ch + kh * d..i * ch + (kh + 1) * d];
            let k_of = |i: usize| &conv[i * ch + (hk + kh) * d..i * ch + (hk + kh + 1) * d];
            let v_of =
                |i: usize| &conv[i * ch + 2 * hk * d + h * d..i * ch + 2 * hk * d + (h + 1) * d];
            let mut a = vec![0.0f32; t];
            for (i, o) in oh.chunks_exact_mut(d).enumerate() {
                let q = q_of(i);
                for (j, aj) in a.iter_mut().enumerate() {
                    *aj = dw.logit_scale[h] * dot(q, k_of(j));
                }
                softmax_inplace(&mut a);
                let lambda = force
                    .unwrap_or_else(|| sigmoid(dw.history_w[h] * g[i * hv + h] + dw.history_b[h]));
                for (jv, oj) in o.iter_mut().enumerate() {
                    // o_hist[jv] = Σ_a S[a][jv]·q[a]; row jv of the stored state.
                    let hist = dot(&s[jv * d..(jv + 1) * d], q) * scale;
                    let mut blk = 0.0f32;
                    for (j, &aj) in a.iter().enumerate() {
                        blk += aj * v_of(j)[jv];
                    }
                    *oj = lambda * hist + (1.0 - lambda) * blk;
                }
            }
        });

    // 6. Gated RMSNorm, then the output projection.
    for ti in 0..t {
        for h in 0..hv {
            let o_h = &sc.o_heads[(h * t + ti) * d..(h * t + ti + 1) * d];
            let dst = &mut sc.o[ti * inner + h * d..ti * inner + (h + 1) * d];
            rmsnorm(o_h, &w.norm, cfg.rms_eps, dst);
            let z = &sc.z[ti * inner + h * d..ti * inner + (h + 1) * d];
            for (x, &zi) in dst.iter_mut().zip(z) {
                *x *= silu(zi);
            }
        }
    }
    lin.new_input();
    lin.project(kt, &w.out, &sc.o[..t * inner], &mut out[..t * cfg.n_embd]);
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Per-call buffers of a diffusion attention layer.
#[derive(Debug)]
pub struct AttnBlockScratch {
    /// `[t][n_head·2·d]`, `[t][n_kv·d]` ×2, `[t][n_head·d]`.
    qg: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    o: Vec<f32>,
    /// Test knob: evaluate the block's queries last to first.
    pub reverse_queries: bool,
}

impl AttnBlockScratch {
    pub fn new(cfg: &ModelConfig, t: usize) -> AttnBlockScratch {
        let (nh, nkv, d) = (cfg.n_head, cfg.n_head_kv, cfg.head_dim);
        AttnBlockScratch {
            qg: vec![0.0; t * nh * 2 * d],
            k: vec![0.0; t * nkv * d],
            v: vec![0.0; t * nkv * d],
            o: vec![0.0; t * nh * d],
            reverse_queries: false,
        }
    }
}

/// The diffusion attention mixer: `t` block rows at positions `pos0..`, each
/// attending to the cached positions `< pos0` (read from `kv` layer `layer`)
/// and to every block row. Nothing is written to the cache.
#[allow(clippy::too_many_arguments)]
pub fn attention_block(
    kt: &KernelTable,
    cfg: &ModelConfig,
    w: &AttentionWeights,
    kv: &KvCache,
    layer: usize,
    pos0: usize,
    u: &[f32],
    t: usize,
    sc: &mut AttnBlockScratch,
    lin: &mut MatScratch,
    out: &mut [f32],
) {
    let (nh, nkv, d) = (cfg.n_head, cfg.n_head_kv, cfg.head_dim);
    let eps = cfg.rms_eps;
    lin.new_input();
    lin.project(kt, &w.q, u, &mut sc.qg[..t * nh * 2 * d]);
    lin.project(kt, &w.k, u, &mut sc.k[..t * nkv * d]);
    lin.project(kt, &w.v, u, &mut sc.v[..t * nkv * d]);
    let mut rope = RopeCache::new(cfg.n_rot, cfg.rope_base, cfg.rope_sections);
    for ti in 0..t {
        rope.set_position(pos0 + ti);
        for head in sc.qg[ti * nh * 2 * d..(ti + 1) * nh * 2 * d].chunks_exact_mut(2 * d) {
            let q = &mut head[..d];
            rmsnorm_inplace(q, &w.q_norm, eps);
            rope.apply(&mut q[..cfg.n_rot]);
        }
        for k in sc.k[ti * nkv * d..(ti + 1) * nkv * d].chunks_exact_mut(d) {
            rmsnorm_inplace(k, &w.k_norm, eps);
            rope.apply(&mut k[..cfg.n_rot]);
        }
    }

    let group = nh / nkv;
    let scale = 1.0 / (d as f32).sqrt();
    let k_dot_ty = kv.ty_k.vec_dot_type();
    let q_bytes = k_dot_ty.row_bytes(d as u64).expect("head is whole blocks") as usize;
    let kdot = kt.vec_dot(kv.ty_k);
    let quant = kt.quantize(k_dot_ty);
    let ty_v = kv.ty_v;
    let (bk, bv) = (&sc.k, &sc.v);
    let order: Vec<usize> = if sc.reverse_queries {
        (0..t).rev().collect()
    } else {
        (0..t).collect()
    };
    for ti in order {
        let qrow = &sc.qg[ti * nh * 2 * d..(ti + 1) * nh * 2 * d];
        let orow = &mut sc.o[ti * nh * d..(ti + 1) * nh * d];
        orow.par_chunks_mut(d).enumerate().for_each(|(h, o)| {
            let gkv = h / group;
            let q = &qrow[h * 2 * d..h * 2 * d + d];
            let gate = &qrow[h * 2 * d + d..(h + 1) * 2 * d];
            let mut qa = vec![0u64; (q_bytes).div_ceil(8)];
            let qa = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut qa)[..q_bytes];
            quant(q, qa);
            let mut scores = vec![0.0f32; pos0 + t];
            for (s, sc) in scores[..pos0].iter_mut().enumerate() {
                *sc = kdot(d, kv.k_head(layer, s, gkv), qa) * scale;
            }
            for j in 0..t {
                let kj = &bk[(j * nkv + gkv) * d..(j * nkv + gkv + 1) * d];
                scores[pos0 + j] = dot(q, kj) * scale;
            }
            softmax_inplace(&mut scores);
            o.fill(0.0);
            let mut vrow = vec![0.0f32; d];
            for (s, &ps) in scores[..pos0].iter().enumerate() {
                kernels::scalar::dequantize_row(ty_v, kv.v_head(layer, s, gkv), &mut vrow);
                for (oj, &vj) in o.iter_mut().zip(&vrow) {
                    *oj += ps * vj;
                }
            }
            for (j, &ps) in scores[pos0..].iter().enumerate() {
                let vj = &bv[(j * nkv + gkv) * d..(j * nkv + gkv + 1) * d];
                for (oj, &x) in o.iter_mut().zip(vj) {
                    *oj += ps * x;
                }
            }
            for (oj, &gj) in o.iter_mut().zip(gate) {
                *oj *= sigmoid(gj);
            }
        });
    }
    lin.new_input();
    lin.project(kt, &w.o, &sc.o[..t * nh * d], &mut out[..t * cfg.n_embd]);
}

/// Test knobs of a diffusion pass.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiffusionKnobs {
    /// Replace every λ by this value.
    pub force_lambda: Option<f32>,
    /// Evaluate attention queries last to first.
    pub reverse_queries: bool,
}

impl Model<'_> {
    /// Whether every GDN layer has the diffusion tensors.
    pub fn has_diffusion(&self) -> bool {
        self.weights.layers.iter().all(|l| match &l.mixer {
            MixerWeights::DeltaNet(w) => w.diffusion.is_some(),
            MixerWeights::Attention(_) => true,
        })
    }

    /// The diffusion forward (DESIGN §3) over the block `tokens` (anchor
    /// first, then drafts or masks) at positions `pos0..`; the state must
    /// hold exactly `pos0` positions and is left bit-identical. Row j of the
    /// logits predicts position `pos0 + j + 1`.
    pub fn forward_diffusion<'s>(
        &self,
        state: &'s mut State,
        tokens: &[u32],
        pos0: usize,
        logits_for: LogitsFor,
    ) -> Result<&'s [f32], ForwardError> {
        self.forward_diffusion_with(state, tokens, pos0, logits_for, DiffusionKnobs::default())
    }

    /// `forward_diffusion` with test knobs.
    pub fn forward_diffusion_with<'s>(
        &self,
        state: &'s mut State,
        tokens: &[u32],
        pos0: usize,
        logits_for: LogitsFor,
        knobs: DiffusionKnobs,
    ) -> Result<&'s [f32], ForwardError> {
        let t = tokens.len();
        let v = self.n_vocab();
        if state.verify_pending() {
            return Err(ForwardError::VerifyPending);
        }
        if !self.has_diffusion() {
            return Err(ForwardError::NoDiffusion);
        }
        if t == 0 {
            return Err(ForwardError::Empty);
        }
        if t > state.max_batch {
            return Err(ForwardError::BlockTooLong {
                n: t,
                max_batch: state.max_batch,
            });
        }
        self.check_batch_at(state, tokens, pos0)?;
        let rows: Vec<(usize, usize)> = match logits_for {
            LogitsFor::Last => vec![(0, t - 1)],
            LogitsFor::All => (0..t).map(|i| (i, i)).collect(),
            LogitsFor::Indices(idx) => {
                if let Some(&i) = idx.iter().find(|&&i| i >= t) {
                    return Err(ForwardError::Index {
                        index: i,
                        n_tokens: t,
                    });
                }
                idx.iter().copied().enumerate().collect()
            }
        };
        if state.scratch.logits.len() < rows.len() * v {
            state.scratch.logits.resize(rows.len() * v, 0.0);
        }
        let kt = kernels::isa::active();
        let cfg = &self.config;
        let e = cfg.n_embd;
        let mut gsc = GdnBlockScratch::new(cfg, t);
        gsc.force_lambda = knobs.force_lambda;
        let mut asc = AttnBlockScratch::new(cfg, t);
        asc.reverse_queries = knobs.reverse_queries;
        self.embed(tokens, &mut state.scratch.x[..t * e]);
        for il in 0..cfg.n_layer {
            let lw = &self.weights.layers[il];
            let s = &mut state.scratch;
            norm_rows(
                &s.x[..t * e],
                &lw.attn_norm,
                cfg.rms_eps,
                &mut s.xn[..t * e],
            );
            match (&lw.mixer, state.slots[il]) {
                (MixerWeights::DeltaNet(w), LayerSlot::DeltaNet(r)) => {
                    let dw = w.diffusion.as_ref().ok_or(ForwardError::NoDiffusion)?;
                    gdn_block(
                        kt,
                        cfg,
                        w,
                        dw,
                        &state.recurrent[r],
                        &s.xn[..t * e],
                        t,
                        &mut gsc,
                        &mut s.lin,
                        &mut s.y,
                    );
                }
                (MixerWeights::Attention(w), LayerSlot::Attention(a)) => attention_block(
                    kt,
                    cfg,
                    w,
                    &state.kv,
                    a,
                    pos0,
                    &s.xn[..t * e],
                    t,
                    &mut asc,
                    &mut s.lin,
                    &mut s.y,
                ),
                _ => unreachable!("layer slots are built from the same layer kinds"),
            }
            add_into(&mut s.x[..t * e], &s.y[..t * e]);
            self.moe_block(kt, state, il, t);
        }
        let s = &mut state.scratch;
        s.head_rows.clear();
        s.head_rows.extend(rows.iter().copied());
        self.head(kt, state);
        Ok(&state.scratch.logits[..rows.len() * v])
    }
}
