//! Mixture of experts with a gated shared expert (docs/DESIGN.md §2.3).
//!
//! Shapes (35B-A3B): u `[T][2048]`; router `[T][256]`; per expert gate/up
//! `512 x 2048`, down `2048 x 512`; shared expert likewise.
//!
//! ```text
//! p = softmax(ffn_gate_inp · u)                     over all experts
//! E = top-k(p)  (descending; ties → lower index)    w_e = p_e / max(Σ_E p, 6.1e-5)
//! moe = Σ_{e ∈ E, in that order} w_e · down_e( silu(gate_e·u) ⊙ up_e·u )
//! out = moe + σ(ffn_gate_inp_shexp · u) · down_s( silu(gate_s·u) ⊙ up_s·u )
//! ```
//! A batch is grouped by expert: each selected expert's weights are streamed
//! once for all the tokens routed to it (an expert-gather product).

use kernels::plan::Kernel;
use kernels::{KernelTable, Mode};
use rayon::prelude::*;

use super::config::ModelConfig;
use super::cx::Cx;
use super::linear::{matmul, Activations, MatScratch, Matrix};
use super::observe::{self, Op};
use super::ops::{sigmoid, softmax_inplace, swiglu_row};
use super::weights::{Experts, FfnWeights, GateUp};

/// Smallest normalising sum, 2^-14 = 6.1035e-5 (ggml clamps to the smallest
/// normal f16).
pub const MIN_WEIGHT_SUM: f32 = 1.0 / 16384.0;

/// Top-`k` of `p` in descending order, ties to the lower index, into `sel`.
pub fn top_k(p: &[f32], sel: &mut [usize]) {
    for i in 0..sel.len() {
        let mut best: Option<usize> = None;
        for (e, &pe) in p.iter().enumerate() {
            if sel[..i].contains(&e) {
                continue;
            }
            if best.is_none_or(|b| pe > p[b]) {
                best = Some(e);
            }
        }
        sel[i] = best.expect("k <= number of experts");
    }
}

/// Router probabilities → selected experts and their renormalised weights.
pub fn route(logits: &mut [f32], sel: &mut [usize], weights: &mut [f32]) {
    softmax_inplace(logits);
    top_k(logits, sel);
    // ggml_sum_rows: accumulated in f64 (ggml_float), rounded once.
    let sum = sel.iter().map(|&e| logits[e] as f64).sum::<f64>() as f32;
    let sum = sum.max(MIN_WEIGHT_SUM);
    for (w, &e) in weights.iter_mut().zip(sel.iter()) {
        *w = logits[e] / sum;
    }
}

/// Top-`k` of `p` among the experts in `pool` only (descending; ties to the
/// lower index), with weights renormalised over the chosen ones as [`route`]
/// does. `p` must already be probabilities.
pub fn route_among(p: &[f32], pool: &[usize], sel: &mut [usize], weights: &mut [f32]) {
    for i in 0..sel.len() {
        let mut best: Option<usize> = None;
        for &e in pool {
            if sel[..i].contains(&e) {
                continue;
            }
            if best.is_none_or(|b| p[e] > p[b] || (p[e] == p[b] && e < b)) {
                best = Some(e);
            }
        }
        sel[i] = best.expect("k <= pool size");
    }
    let sum = sel.iter().map(|&e| p[e] as f64).sum::<f64>() as f32;
    let sum = sum.max(MIN_WEIGHT_SUM);
    for (w, &e) in weights.iter_mut().zip(sel.iter()) {
        *w = p[e] / sum;
    }
}

/// How routed experts are evaluated (`Auto` picks by how shared they are).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertPath {
    Auto,
    Grouped,
    Flat,
}

/// Scratch of the MoE block for up to `max_batch` tokens.
#[derive(Debug)]
pub struct MoeScratch {
    /// `[T][n_expert]` router logits, then probabilities.
    router: Vec<f32>,
    /// `[T][k]` selected experts and weights.
    pub(crate) sel: Vec<usize>,
    weights: Vec<f32>,
    /// Tokens per expert: `(token, slot)` grouped by expert, with offsets.
    routed: Vec<(usize, usize)>,
    /// `[T][k]`: the index in `routed` (the row of `dn`) of each slot.
    row_of: Vec<usize>,
    offsets: Vec<usize>,
    fill: Vec<usize>,
    idx: Vec<usize>,
    expert_of: Vec<usize>,
    /// Test hook: force one evaluation path.
    pub path: ExpertPath,
    /// Draft passes only (docs/DESIGN.md §3, "expert pool"): when ≥ `k`, rows after
    /// the first choose their experts among the first row's `pool` most
    /// probable ones, so a block streams `pool` experts per layer rather
    /// than up to `k` per row. 0: every row routes freely.
    pub pool: usize,
    /// The row whose experts make the pool; rows after it are pooled, rows
    /// before it route freely (0 in a draft pass; a fused verify + draft
    /// pass's block starts after its verify rows).
    pub pool_row: usize,
    pool_sel: Vec<usize>,
    gathered: Activations,
    /// `[T][2·n_ff]` gate|up of one expert (or gate, then up).
    gu: Vec<f32>,
    up: Vec<f32>,
    /// `[T][n_ff]` silu(gate) ⊙ up and its conversion.
    h: Vec<f32>,
    h_act: Activations,
    /// `[T·k][n_embd]` the experts' down outputs, in routed order.
    dn: Vec<f32>,
    /// `[T][k][n_embd]` each slot's expert output (filled for the dump only).
    slots: Vec<f32>,
    /// Shared expert: `[T][n_ff_s]` ×2, `[T]` gate.
    sh_g: Vec<f32>,
    sh_u: Vec<f32>,
    sh_gate: Vec<f32>,
    sh_out: Vec<f32>,
}

impl MoeScratch {
    pub fn new(cfg: &ModelConfig, t: usize) -> MoeScratch {
        let (e, ff, ffs, k) = (cfg.n_embd, cfg.n_ff_exp, cfg.n_ff_shexp, cfg.n_expert_used);
        let ff_max = ff.max(ffs);
        MoeScratch {
            router: vec![0.0; t * cfg.n_expert],
            sel: vec![0; t * k],
            weights: vec![0.0; t * k],
            routed: vec![(0, 0); t * k],
            row_of: vec![0; t * k],
            offsets: vec![0; cfg.n_expert + 1],
            fill: vec![0; cfg.n_expert],
            idx: Vec::with_capacity(t * k),
            expert_of: Vec::with_capacity(t * k),
            path: ExpertPath::Auto,
            pool: 0,
            pool_row: 0,
            pool_sel: Vec::new(),
            gathered: Activations::with_capacity(t * k * e * 4),
            gu: vec![0.0; t * k * 2 * ff],
            up: vec![0.0; t * k * ff],
            h: vec![0.0; t * k * ff_max],
            h_act: Activations::with_capacity(t * k * ff_max * 4),
            dn: vec![0.0; t * k * e],
            slots: vec![0.0; t * k * e],
            sh_g: vec![0.0; t * ffs],
            sh_u: vec![0.0; t * ffs],
            sh_gate: vec![0.0; t],
            sh_out: vec![0.0; t * e],
        }
    }

    /// Experts selected for token `t` of the last call (descending weight).
    pub fn selected(&self, t: usize, k: usize) -> &[usize] {
        &self.sel[t * k..(t + 1) * k]
    }
}

/// The MoE block over `t` tokens of normed input `u`, writing `out`.
pub fn forward(
    cx: Cx,
    w: &FfnWeights,
    u: &[f32],
    t: usize,
    sc: &mut MoeScratch,
    lin: &mut MatScratch,
    out: &mut [f32],
) {
    let Cx { kt, mode, cfg } = cx;
    let (e, ne, k) = (cfg.n_embd, cfg.n_expert, cfg.n_expert_used);
    let u = &u[..t * e];

    // 1. Route.
    let router = observe::enter(Op::Router);
    lin.new_input();
    lin.project(kt, mode, &w.router, u, &mut sc.router[..t * ne]);
    observe::here("ffn_moe_logits", t, &sc.router[..t * ne]);
    let pooled = sc.pool >= k && sc.pool < ne && t > sc.pool_row + 1;
    for ti in 0..t {
        let p = &mut sc.router[ti * ne..(ti + 1) * ne];
        let (sel, wts) = (
            &mut sc.sel[ti * k..(ti + 1) * k],
            &mut sc.weights[ti * k..(ti + 1) * k],
        );
        if pooled && ti > sc.pool_row {
            softmax_inplace(p);
            route_among(p, &sc.pool_sel, sel, wts);
        } else {
            route(p, sel, wts);
        }
        if pooled && ti == sc.pool_row {
            sc.pool_sel.resize(sc.pool, 0);
            top_k(p, &mut sc.pool_sel);
        }
    }

    if observe::wants_tensors() {
        observe::here("ffn_moe_probs", t, &sc.router[..t * ne]);
        observe::here("ffn_moe_weights_norm", t, &sc.weights[..t * k]);
        let sel: Vec<f32> = sc.sel[..t * k].iter().map(|&x| x as f32).collect();
        observe::here("ffn_moe_topk", t, &sel);
    }
    if observe::on() {
        // ggml's order: slot by slot, token by token.
        let (sel, u) = (&sc.sel, u);
        let rows = || {
            (0..k).flat_map(move |slot| {
                (0..t).map(move |ti| (sel[ti * k + slot], &u[ti * e..(ti + 1) * e]))
            })
        };
        match w.gate_up {
            GateUp::Fused(gu) => observe::routed(gu.name, ne, e, rows()),
            GateUp::Split { gate, up } => {
                observe::routed(gate.name, ne, e, rows());
                observe::routed(up.name, ne, e, rows());
            }
        }
    }
    drop(router);
    // 2. Group (token, slot) pairs by expert.
    let experts = observe::enter(Op::Experts);
    sc.offsets.fill(0);
    for &x in &sc.sel[..t * k] {
        sc.offsets[x + 1] += 1;
    }
    for x in 0..ne {
        sc.offsets[x + 1] += sc.offsets[x];
    }
    sc.fill.copy_from_slice(&sc.offsets[..ne]);
    for ti in 0..t {
        for slot in 0..k {
            let x = sc.sel[ti * k + slot];
            sc.routed[sc.fill[x]] = (ti, slot);
            sc.row_of[ti * k + slot] = sc.fill[x];
            sc.fill[x] += 1;
        }
    }

    // 3. The selected experts: grouped by expert when experts are shared
    //    by several tokens, else every (token, slot) pair in one product.
    let distinct = (0..ne)
        .filter(|&x| sc.offsets[x + 1] > sc.offsets[x])
        .count();
    // Repacked experts take any number of rows in one weight stream at the
    // same bits, so an expert shared by two rows already pays grouped (its
    // weights stream once, not twice; `--pass-costs 4,16` shows it).
    // Otherwise grouping pays from two rows per expert on average.
    let packed = matches!(kt.plan(&w.down.q().expert(0), 2, mode), Kernel::Packed(_));
    let flat = match sc.path {
        ExpertPath::Auto if packed => t * k == distinct,
        ExpertPath::Auto => t * k <= 2 * distinct,
        ExpertPath::Grouped => false,
        ExpertPath::Flat => true,
    };
    if observe::on() {
        let gu = match w.gate_up {
            GateUp::Fused(gu) => gu.expert(0).bytes(),
            GateUp::Split { gate, up } => gate.expert(0).bytes() + up.expert(0).bytes(),
        };
        observe::bytes(distinct * (gu + w.down.expert(0).bytes()));
    }
    if flat {
        experts_flat(cx, w, u, sc, lin);
    } else {
        experts_grouped(cx, w, u, sc, lin);
    }
    drop(experts);

    // 4. Shared expert and its gate.
    let shared = observe::enter(Op::SharedExpert);
    let ffs = cfg.n_ff_shexp;
    lin.project(kt, mode, &w.shexp_gate, u, &mut sc.sh_g[..t * ffs]);
    lin.project(kt, mode, &w.shexp_up, u, &mut sc.sh_u[..t * ffs]);
    lin.project(kt, mode, &w.shexp_gate_inp, u, &mut sc.sh_gate[..t]);
    for r in 0..t {
        swiglu(
            &sc.sh_g[r * ffs..(r + 1) * ffs],
            &sc.sh_u[r * ffs..(r + 1) * ffs],
            &mut sc.h[r * ffs..(r + 1) * ffs],
        );
    }
    observe::product(w.shexp_down.name, &sc.h[..t * ffs], ffs);
    sc.h_act
        .quantize(kt, w.shexp_down.ty.vec_dot_type(), &sc.h[..t * ffs], ffs);
    matmul(
        kt,
        &w.shexp_down,
        &sc.h_act,
        &mut sc.sh_out[..t * e],
        &mut lin.tile,
        mode,
    );

    if observe::wants_tensors() {
        for (r, &(ti, slot)) in sc.routed[..t * k].iter().enumerate() {
            sc.slots[(ti * k + slot) * e..(ti * k + slot + 1) * e]
                .copy_from_slice(&sc.dn[r * e..(r + 1) * e]);
        }
        observe::here("ffn_moe_down", t, &sc.slots[..t * k * e]);
        observe::here("ffn_shexp", t, &sc.sh_out[..t * e]);
        observe::here("shared_expert_gate", t, &sc.sh_gate[..t]);
    }
    drop(shared);
    // 5. Weighted sum in slot order, plus the gated shared expert (the
    //    expert outputs are `dn`'s rows, in routed order).
    let _p = observe::enter(Op::Experts);
    let (weights, row_of, dn, sh_gate, sh_out) =
        (&sc.weights, &sc.row_of, &sc.dn, &sc.sh_gate, &sc.sh_out);
    let sum = |ti: usize, o: &mut [f32]| {
        for slot in 0..k {
            let wt = weights[ti * k + slot];
            let r = row_of[ti * k + slot];
            let y = &dn[r * e..(r + 1) * e];
            if slot == 0 {
                for (oi, &yi) in o.iter_mut().zip(y) {
                    *oi = yi * wt;
                }
            } else {
                for (oi, &yi) in o.iter_mut().zip(y) {
                    *oi += yi * wt;
                }
            }
        }
        let g = sigmoid(sh_gate[ti]);
        let sh = &sh_out[ti * e..(ti + 1) * e];
        for (oi, &si) in o.iter_mut().zip(sh) {
            *oi += si * g;
        }
    };
    if t == 1 {
        sum(0, &mut out[..e]);
    } else {
        out[..t * e]
            .par_chunks_mut(e)
            .enumerate()
            .for_each(|(ti, o)| sum(ti, o));
    }
}

/// One worker's buffers for one expert's products (grouped path).
#[derive(Debug, Default)]
struct ExpertBufs {
    idx: Vec<usize>,
    gathered: Activations,
    gu: Vec<f32>,
    up: Vec<f32>,
    h: Vec<f32>,
    h_act: Activations,
    tile: Vec<f32>,
}

/// Each selected expert on the tokens routed to it: its rows are streamed
/// once for all of them. Experts run in parallel, one whole expert (gate,
/// up, down) per task, writing its rows of `sc.dn` (routed order).
fn experts_grouped(cx: Cx, w: &FfnWeights, u: &[f32], sc: &mut MoeScratch, lin: &mut MatScratch) {
    let Cx { kt, mode, cfg } = cx;
    let (e, ne, ff) = (cfg.n_embd, cfg.n_expert, cfg.n_ff_exp);
    let (g_ty, u_ty) = match w.gate_up {
        GateUp::Fused(gu) => (gu.ty.vec_dot_type(), gu.ty.vec_dot_type()),
        GateUp::Split { gate, up } => (gate.ty.vec_dot_type(), up.ty.vec_dot_type()),
    };
    lin.cache.get(kt, g_ty, u, e);
    lin.cache.get(kt, u_ty, u, e);
    let (a_g, a_u) = (lin.cache.find(g_ty, u), lin.cache.find(u_ty, u));
    let (Some(a_g), Some(a_u)) = (a_g, a_u) else {
        unreachable!("both conversions were just made");
    };
    let off = &sc.offsets;
    let mut jobs = Vec::with_capacity(ne);
    let mut rest = &mut sc.dn[..off[ne] * e];
    for x in 0..ne {
        let n = off[x + 1] - off[x];
        if n > 0 {
            let (mine, r) = rest.split_at_mut(n * e);
            jobs.push((x, off[x], mine));
            rest = r;
        }
    }
    let routed = &sc.routed;
    // One expert's rows: the plan picks the kernel for their count and the
    // mode (a prompt batch's expert with enough tokens takes the prompt
    // kernels).
    let product = |m: &Matrix, x: &Activations, out: &mut [f32], tile: &mut Vec<f32>| {
        matmul(kt, m, x, out, tile, mode);
    };
    jobs.into_par_iter()
        .for_each_init(ExpertBufs::default, |b, (x, a, dn)| {
            let n = dn.len() / e;
            b.idx.clear();
            b.idx.extend(routed[a..a + n].iter().map(|&(ti, _)| ti));
            b.h.resize(n * ff, 0.0);
            match w.gate_up {
                GateUp::Fused(gu) => {
                    b.gu.resize(n * 2 * ff, 0.0);
                    b.gathered.gather(a_g, &b.idx);
                    product(&gu.expert(x), &b.gathered, &mut b.gu, &mut b.tile);
                    for r in 0..n {
                        let (g, up) = b.gu[r * 2 * ff..(r + 1) * 2 * ff].split_at(ff);
                        swiglu(g, up, &mut b.h[r * ff..(r + 1) * ff]);
                    }
                }
                GateUp::Split { gate, up } => {
                    b.gu.resize(n * ff, 0.0);
                    b.up.resize(n * ff, 0.0);
                    b.gathered.gather(a_g, &b.idx);
                    product(&gate.expert(x), &b.gathered, &mut b.gu, &mut b.tile);
                    if u_ty != g_ty {
                        b.gathered.gather(a_u, &b.idx);
                    }
                    product(&up.expert(x), &b.gathered, &mut b.up, &mut b.tile);
                    for r in 0..n {
                        let (g, upr) = (&b.gu[r * ff..(r + 1) * ff], &b.up[r * ff..(r + 1) * ff]);
                        swiglu(g, upr, &mut b.h[r * ff..(r + 1) * ff]);
                    }
                }
            }
            let down = w.down.expert(x);
            observe::routed(down.name, ne, ff, b.h.chunks_exact(ff).map(|r| (x, r)));
            b.h_act.quantize(kt, down.ty.vec_dot_type(), &b.h, ff);
            product(&down, &b.h_act, dn, &mut b.tile);
        });
}

/// Every (token, slot) pair at once, in routed order: one parallel product
/// per projection, each pair reading its own expert's rows.
fn experts_flat(cx: Cx, w: &FfnWeights, u: &[f32], sc: &mut MoeScratch, lin: &mut MatScratch) {
    let Cx { kt, mode, cfg } = cx;
    let (e, k, ff) = (cfg.n_embd, cfg.n_expert_used, cfg.n_ff_exp);
    let t = u.len() / e;
    let n = t * k;
    sc.idx.clear();
    sc.idx.extend(sc.routed[..n].iter().map(|&(ti, _)| ti));
    sc.expert_of.clear();
    sc.expert_of.extend(
        sc.routed[..n]
            .iter()
            .map(|&(ti, slot)| sc.sel[ti * k + slot]),
    );
    match w.gate_up {
        GateUp::Fused(gu) => {
            sc.gathered
                .gather(lin.cache.get(kt, gu.ty.vec_dot_type(), u, e), &sc.idx);
            rows_product(
                kt,
                mode,
                &gu,
                &sc.expert_of,
                &sc.gathered,
                &mut sc.gu[..n * 2 * ff],
            );
            for r in 0..n {
                let (g, up) = sc.gu[r * 2 * ff..(r + 1) * 2 * ff].split_at(ff);
                swiglu(g, up, &mut sc.h[r * ff..(r + 1) * ff]);
            }
        }
        GateUp::Split { gate, up } => {
            sc.gathered
                .gather(lin.cache.get(kt, gate.ty.vec_dot_type(), u, e), &sc.idx);
            rows_product(
                kt,
                mode,
                &gate,
                &sc.expert_of,
                &sc.gathered,
                &mut sc.gu[..n * ff],
            );
            if up.ty.vec_dot_type() != gate.ty.vec_dot_type() {
                sc.gathered
                    .gather(lin.cache.get(kt, up.ty.vec_dot_type(), u, e), &sc.idx);
            }
            rows_product(
                kt,
                mode,
                &up,
                &sc.expert_of,
                &sc.gathered,
                &mut sc.up[..n * ff],
            );
            for r in 0..n {
                let (g, upr) = (&sc.gu[r * ff..(r + 1) * ff], &sc.up[r * ff..(r + 1) * ff]);
                swiglu(g, upr, &mut sc.h[r * ff..(r + 1) * ff]);
            }
        }
    }
    observe::routed(
        w.down.name,
        w.down.n_expert,
        ff,
        sc.expert_of
            .iter()
            .zip(sc.h[..n * ff].chunks_exact(ff))
            .map(|(&x, r)| (x, r)),
    );
    sc.h_act
        .quantize(kt, w.down.ty.vec_dot_type(), &sc.h[..n * ff], ff);
    rows_product(
        kt,
        mode,
        &w.down,
        &sc.expert_of,
        &sc.h_act,
        &mut sc.dn[..n * e],
    );
}

/// `out[r] = M_{expert_of[r]} · acts[r]` for every row r, in one parallel
/// region over (row, output chunk).
fn rows_product(
    kt: &KernelTable,
    mode: Mode,
    m: &Experts,
    expert_of: &[usize],
    acts: &Activations,
    out: &mut [f32],
) {
    kernels::matmul::expert_gather(kt, &m.q(), expert_of, &acts.q(), out, mode);
}

/// `h = silu(g) ⊙ up` (one ggml row: `ggml_vec_swiglu_f32`).
#[inline]
fn swiglu(g: &[f32], up: &[f32], h: &mut [f32]) {
    swiglu_row(g, up, h);
}

#[cfg(test)]
#[path = "moe_tests.rs"]
pub(crate) mod tests;
