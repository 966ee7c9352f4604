//! Routing on crafted router logits, and the MoE block against a direct f64
//! transcription of docs/DESIGN.md §2.3.

use crate::model::cx::Cx;
use crate::model::linear::MatScratch;
use crate::model::moe::{self, route, route_among, top_k, ExpertPath, MoeScratch};
use crate::model::tiny::*;

#[test]
fn top_k_is_descending_with_ties_to_the_lower_index() {
    let p = [0.1f32, 0.3, 0.3, 0.2, 0.1];
    let mut sel = [0usize; 3];
    top_k(&p, &mut sel);
    assert_eq!(sel, [1, 2, 3]);
    let mut sel = [0usize; 5];
    top_k(&p, &mut sel);
    assert_eq!(sel, [1, 2, 3, 0, 4]);
}

#[test]
fn route_renormalises_the_selected_softmax_probabilities() {
    // softmax(ln [1, 2, 3, 4]) = [1, 2, 3, 4] / 10; top 2 = experts 3, 2 with
    // weights 4/7 and 3/7.
    let mut logits: Vec<f32> = [1.0f32, 2.0, 3.0, 4.0].iter().map(|x| x.ln()).collect();
    let mut sel = [0usize; 2];
    let mut w = [0.0f32; 2];
    route(&mut logits, &mut sel, &mut w);
    assert_eq!(sel, [3, 2]);
    assert!((w[0] - 4.0 / 7.0).abs() < 1e-6);
    assert!((w[1] - 3.0 / 7.0).abs() < 1e-6);
    assert!(
        (logits[0] - 0.1).abs() < 1e-6,
        "router output is the full softmax"
    );
}

#[test]
fn route_among_picks_the_top_k_of_the_pool_and_renormalises_over_them() {
    let p = [0.05f32, 0.3, 0.2, 0.2, 0.25];
    let (mut sel, mut w) = ([0usize; 2], [0.0f32; 2]);
    // The pool's order does not matter; the tie 0.2 / 0.2 goes to expert 2.
    route_among(&p, &[3, 0, 2], &mut sel, &mut w);
    assert_eq!(sel, [2, 3]);
    assert_eq!(w, [0.5, 0.5]);
    route_among(&p, &[0, 4, 3], &mut sel, &mut w);
    assert_eq!(sel, [4, 3]);
    assert!((w[0] - 0.25 / 0.45).abs() < 1e-6 && (w[1] - 0.2 / 0.45).abs() < 1e-6);
    // A pool of every expert routes as `route` does, bit for bit.
    let mut r = Rng::new(3);
    for _ in 0..50 {
        let logits = r.vec(9, 2.0);
        let (mut sel_a, mut w_a) = ([0usize; 3], [0.0f32; 3]);
        let mut probs = logits.clone();
        route(&mut probs, &mut sel_a, &mut w_a);
        let (mut sel_b, mut w_b) = ([0usize; 3], [0.0f32; 3]);
        let all: Vec<usize> = (0..9).rev().collect();
        route_among(&probs, &all, &mut sel_b, &mut w_b);
        assert_eq!((sel_a, w_a), (sel_b, w_b));
    }
}

#[test]
fn a_draft_expert_pool_routes_later_tokens_among_the_first_tokens_experts() {
    let tm = TinyModel::random(tiny_config(2, 2), 36);
    let (ne, k) = (tm.cfg.n_expert, tm.cfg.n_expert_used);
    let mut r = Rng::new(12);
    let u = r.vec(6 * tm.cfg.n_embd, 1.0);
    let (free, free_sel) = run(&tm, &u);
    for pool in [k, k + 1] {
        let want = reference_pooled(&tm, 0, &u, pool);
        for path in [ExpertPath::Grouped, ExpertPath::Flat] {
            let (got, sel) = run_pooled(&tm, &u, path, pool);
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "pool {pool} {path:?} [{i}] {g} vs {w}"
                );
            }
            // The first token routes freely; with pool = k every token
            // takes exactly the first token's experts.
            assert_eq!(sel[..k], free_sel[..k]);
            assert_eq!(got[..tm.cfg.n_embd], free[..tm.cfg.n_embd]);
            if pool == k {
                for row in sel.chunks(k) {
                    let mut a = row.to_vec();
                    let mut b = sel[..k].to_vec();
                    a.sort();
                    b.sort();
                    assert_eq!(a, b);
                }
            }
        }
    }
    // The pool changed something (else the test proves nothing), and a pool
    // of every expert changes nothing.
    let (pooled, _) = run_pooled(&tm, &u, ExpertPath::Auto, k);
    assert_ne!(pooled, free);
    let (all, _) = run_pooled(&tm, &u, ExpertPath::Auto, ne);
    assert_eq!(all, free);
}

pub(crate) fn reference(tm: &TinyModel, il: usize, u: &[f32]) -> Vec<f64> {
    reference_pooled(tm, il, u, 0)
}

/// [`reference`] where, with `pool > 0`, tokens after the first choose their
/// top-k among the first token's `pool` most probable experts (a draft
/// pass's expert pool).
fn reference_pooled(tm: &TinyModel, il: usize, u: &[f32], pool: usize) -> Vec<f64> {
    let c = &tm.cfg;
    let v = |s: &str| tm.values(&format!("blk.{il}.{s}"));
    let (e, ne, k, ff, ffs) = (
        c.n_embd,
        c.n_expert,
        c.n_expert_used,
        c.n_ff_exp,
        c.n_ff_shexp,
    );
    let router = v("ffn_gate_inp.weight");
    let (gate, up, down) = (
        v("ffn_gate_exps.weight"),
        v("ffn_up_exps.weight"),
        v("ffn_down_exps.weight"),
    );
    let (sg, su, sd, sgi) = (
        v("ffn_gate_shexp.weight"),
        v("ffn_up_shexp.weight"),
        v("ffn_down_shexp.weight"),
        v("ffn_gate_inp_shexp.weight"),
    );
    let silu = |x: f64| x / (1.0 + (-x).exp());
    let mv = |w: &[f32], off: usize, x: &[f64], n_out: usize| -> Vec<f64> {
        (0..n_out)
            .map(|o| {
                (0..x.len())
                    .map(|i| w[off + o * x.len() + i] as f64 * x[i])
                    .sum()
            })
            .collect()
    };
    let ffn = |g: &[f32],
               uw: &[f32],
               d: &[f32],
               goff: usize,
               doff: usize,
               n: usize,
               x: &[f64]|
     -> Vec<f64> {
        let gg = mv(g, goff, x, n);
        let uu = mv(uw, goff, x, n);
        let h: Vec<f64> = gg.iter().zip(&uu).map(|(a, b)| silu(*a) * b).collect();
        mv(d, doff, &h, e)
    };
    let mut out = vec![];
    let mut anchor_pool: Vec<usize> = Vec::new();
    for (row, x) in u.chunks(e).enumerate() {
        let x: Vec<f64> = x.iter().map(|a| *a as f64).collect();
        let logits = mv(&router, 0, &x, ne);
        let mx = logits.iter().cloned().fold(f64::MIN, f64::max);
        let z: f64 = logits.iter().map(|l| (l - mx).exp()).sum();
        let p: Vec<f64> = logits.iter().map(|l| (l - mx).exp() / z).collect();
        let mut order: Vec<usize> = (0..ne).collect();
        order.sort_by(|a, b| p[*b].partial_cmp(&p[*a]).unwrap().then(a.cmp(b)));
        if pool > 0 {
            if row == 0 {
                anchor_pool = order[..pool].to_vec();
            } else {
                order.retain(|x| anchor_pool.contains(x));
            }
        }
        let chosen = &order[..k];
        let sum: f64 = chosen.iter().map(|&x| p[x]).sum::<f64>().max(6.1e-5);
        let mut y = vec![0.0f64; e];
        for &x_e in chosen {
            let o = ffn(&gate, &up, &down, x_e * ff * e, x_e * e * ff, ff, &x);
            for i in 0..e {
                y[i] += p[x_e] / sum * o[i];
            }
        }
        let sh = ffn(&sg, &su, &sd, 0, 0, ffs, &x);
        let gs: f64 = (0..e).map(|i| sgi[i] as f64 * x[i]).sum();
        let gs = 1.0 / (1.0 + (-gs).exp());
        out.extend(y.iter().zip(&sh).map(|(a, b)| a + gs * b));
    }
    out
}

fn run(tm: &TinyModel, u: &[f32]) -> (Vec<f32>, Vec<usize>) {
    run_path(tm, u, ExpertPath::Auto)
}

fn run_path(tm: &TinyModel, u: &[f32], path: ExpertPath) -> (Vec<f32>, Vec<usize>) {
    run_pooled(tm, u, path, 0)
}

fn run_pooled(tm: &TinyModel, u: &[f32], path: ExpertPath, pool: usize) -> (Vec<f32>, Vec<usize>) {
    let model = tm.model();
    let cfg = &model.config;
    let kt = kernels::KernelTable::chosen();
    let t = u.len() / cfg.n_embd;
    let mut sc = MoeScratch::new(cfg, t);
    sc.path = path;
    sc.pool = pool;
    let mut lin = MatScratch::new(t, 64);
    let mut out = vec![0.0f32; u.len()];
    moe::forward(
        Cx {
            kt,
            mode: kernels::Mode::Decode,
            cfg,
        },
        &model.weights.layers[0].ffn,
        u,
        t,
        &mut sc,
        &mut lin,
        &mut out,
    );
    let sel = (0..t)
        .flat_map(|i| sc.selected(i, cfg.n_expert_used).to_vec())
        .collect();
    (out, sel)
}

#[test]
fn moe_block_matches_the_design_transcription_for_a_batch() {
    let tm = TinyModel::random(tiny_config(2, 2), 31);
    let mut r = Rng::new(10);
    let u = r.vec(7 * tm.cfg.n_embd, 1.0);
    let (got, sel) = run(&tm, &u);
    let want = reference(&tm, 0, &u);
    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "[{i}] {g} vs {w}"
        );
    }
    // Different tokens really used different experts (the grouping is exercised).
    let distinct: std::collections::HashSet<_> = sel.iter().collect();
    assert!(distinct.len() >= 3, "{sel:?}");
}

#[test]
fn fused_gate_up_experts_give_the_same_output_as_split_ones() {
    let tm = TinyModel::random(tiny_config(2, 2), 32);
    let mut r = Rng::new(11);
    let u = r.vec(3 * tm.cfg.n_embd, 1.0);
    let (split, _) = run(&tm, &u);
    let c = tm.cfg.clone();
    let (e, ff, ne) = (c.n_embd, c.n_ff_exp, c.n_expert);
    let (g, up) = (
        tm.values("blk.0.ffn_gate_exps.weight"),
        tm.values("blk.0.ffn_up_exps.weight"),
    );
    let mut fused = Vec::with_capacity(2 * g.len());
    for x in 0..ne {
        fused.extend_from_slice(&g[x * ff * e..(x + 1) * ff * e]);
        fused.extend_from_slice(&up[x * ff * e..(x + 1) * ff * e]);
    }
    let mut tm = tm;
    tm.tensors.remove("blk.0.ffn_gate_exps.weight");
    tm.tensors.remove("blk.0.ffn_up_exps.weight");
    tm.set(
        "blk.0.ffn_gate_up_exps.weight",
        Tensor::f32(&[e as u64, 2 * ff as u64, ne as u64], &fused),
    );
    for path in [ExpertPath::Grouped, ExpertPath::Flat] {
        let (got, _) = run_path(&tm, &u, path);
        assert_eq!(split, got, "{path:?}");
    }
}

#[test]
fn grouped_and_flat_expert_paths_agree_with_the_reference() {
    for (seed, n_tok) in [(33u64, 1usize), (34, 2), (35, 7)] {
        let tm = TinyModel::random(tiny_config(2, 2), seed);
        let mut r = Rng::new(seed);
        let u = r.vec(n_tok * tm.cfg.n_embd, 1.0);
        let (grouped, _) = run_path(&tm, &u, ExpertPath::Grouped);
        let (flat, _) = run_path(&tm, &u, ExpertPath::Flat);
        assert_eq!(grouped, flat, "{n_tok} tokens");
        let want = reference(&tm, 0, &u);
        for (g, w) in flat.iter().zip(&want) {
            assert!((*g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()));
        }
    }
}
