//! The block-diffusion forward (docs/DESIGN.md §3) on synth `clover_moe` files against
//! an independent plain reference: f64 loops written from docs/DESIGN.md §2 and §3,
//! sharing no code with the engine's forward. Weights are read from the
//! loaded file and dequantised through the kernels' scalar dequantisers (the
//! format specification); the prefix runs token by token through §2, then the
//! block `[anchor, M × D]` through §3, and every block row's logits are
//! compared with `Model::forward_diffusion`.
//!
//! Activation convention (docs/DESIGN.md §2.6): the engine presents the input of each
//! matrix product as f32 converted to the weight's `vec_dot_type`. The
//! reference does the same at every product: rounds the input to f32 and, for
//! a quantised weight, quantises it with the scalar quantiser of the dot type
//! and reads it back, then multiplies in f64.
//!
//! The tight comparison is the `f32` recipe (the `clover synth` default):
//! measured max |Δlogit| (logits up to ~8), D ∈ {1, 4, 15}: tiny 2.7e-6,
//! 5.1e-6, 4.1e-6; small 6.0e-6, 4.1e-6, 4.1e-6. Asserted: < 1e-4.
//!
//! With a quantised recipe the comparison cannot be tight: an activation that
//! lands within f32 noise of a Q8 rounding boundary rounds one step apart in
//! the two computations, and random weights amplify that step. Measured on
//! the reference alone, scaling every product input by (1 + 1e-6) moves the
//! small q4_k_m logits by up to 0.64 and (1 + 1e-5) the tiny ones by up to
//! 0.08. Engine vs reference there: tiny 6.8e-7 (D 1, no boundary hit),
//! 2.9e-2, 3.9e-2; small 0.19, 0.54, 0.61. The q4_k_m tests assert bounds of
//! that sensitivity (0.15 tiny, 1.5 small): they catch a wrong layout or
//! formula (dropping the right conv taps from the reference gives 3.2–6.6 on
//! every file), not f32-level disagreement.

use std::collections::HashMap;
use std::path::Path;

use clover::gguf::GgufFile;
use clover::kernels::{scalar, GgmlType};
use clover::model::{LayerKind, LogitsFor, Model, ModelConfig, StateOptions};
use clover::synth::{self, Arch, Preset, Recipe, SynthOptions};

/// A dequantised weight: `rows` rows of `n_in` values, and its file type.
struct W {
    ty: GgmlType,
    n_in: usize,
    v: Vec<f32>,
}

/// The reference's view of a file: its config and every tensor dequantised.
struct Reference {
    cfg: ModelConfig,
    w: HashMap<String, W>,
}

impl Reference {
    fn new(file: &GgufFile) -> Reference {
        let cfg = ModelConfig::from_metadata(|k| file.get(k)).unwrap();
        let mut w = HashMap::new();
        for info in file.tensors() {
            let t = file.view(info);
            let n: u64 = t.dims.iter().product();
            let mut v = vec![0.0f32; n as usize];
            scalar::dequantize_row(t.ty, t.data, &mut v);
            w.insert(
                t.name.to_string(),
                W {
                    ty: t.ty,
                    n_in: t.dims[0] as usize,
                    v,
                },
            );
        }
        Reference { cfg, w }
    }

    fn get(&self, name: &str) -> &W {
        self.w
            .get(name)
            .unwrap_or_else(|| panic!("missing tensor {name}"))
    }

    fn layer(&self, il: usize, s: &str) -> &W {
        self.get(&format!("blk.{il}.{s}"))
    }
}

/// `x` as the engine hands it to a product with a `ty` weight.
fn act(ty: GgmlType, x: &[f64]) -> Vec<f64> {
    let x32: Vec<f32> = x.iter().map(|a| *a as f32).collect();
    let dt = ty.vec_dot_type();
    if dt == GgmlType::F32 {
        return x32.iter().map(|a| *a as f64).collect();
    }
    let mut q = vec![0u8; dt.row_bytes(x.len() as u64).unwrap() as usize];
    scalar::quantize_row(dt, &x32, &mut q, None);
    let mut back = vec![0.0f32; x.len()];
    scalar::dequantize_row(dt, &q, &mut back);
    back.iter().map(|a| *a as f64).collect()
}

/// Rows `row0 .. row0 + n_out` of `w` times `x`.
fn matvec_rows(w: &W, row0: usize, n_out: usize, x: &[f64]) -> Vec<f64> {
    assert_eq!(x.len(), w.n_in);
    let xa = act(w.ty, x);
    (row0..row0 + n_out)
        .map(|o| {
            let r = &w.v[o * w.n_in..(o + 1) * w.n_in];
            r.iter().zip(&xa).map(|(a, b)| *a as f64 * b).sum()
        })
        .collect()
}

fn matvec(w: &W, x: &[f64]) -> Vec<f64> {
    matvec_rows(w, 0, w.v.len() / w.n_in, x)
}

fn sig(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn silu(x: f64) -> f64 {
    x * sig(x)
}

fn rmsnorm(x: &[f64], w: &[f32], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|a| a * a).sum::<f64>() / x.len() as f64;
    let r = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(a, b)| a * r * *b as f64).collect()
}

fn l2(x: &[f64], eps: f64) -> Vec<f64> {
    let n = (x.iter().map(|v| v * v).sum::<f64>() + eps).sqrt();
    x.iter().map(|v| v / n).collect()
}

fn softmax(x: &[f64]) -> Vec<f64> {
    let mx = x.iter().cloned().fold(f64::MIN, f64::max);
    let e: Vec<f64> = x.iter().map(|a| (a - mx).exp()).collect();
    let z: f64 = e.iter().sum();
    e.iter().map(|a| a / z).collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// §2.1 + §3 for one GDN layer: the first `n` rows of `u` are the prefix,
/// run token by token; the rest is the block, run from the prefix state.
fn gdn(r: &Reference, il: usize, u: &[Vec<f64>], n: usize) -> Vec<Vec<f64>> {
    let c = &r.cfg;
    let (hk, hv, d) = (c.ssm_n_k_heads, c.ssm_n_v_heads, c.ssm_head_dim);
    let (ch, kn, kr) = (
        c.ssm_conv_channels(),
        c.ssm_conv_kernel,
        c.ssm_conv_kernel_right,
    );
    let eps = c.rms_eps as f64;
    let l = |s: &str| r.layer(il, s);
    let (conv_w, conv_r) = (&l("ssm_conv1d.weight").v, &l("ssm_conv1d.weight_right").v);
    let (dt, a_log) = (&l("ssm_dt.bias").v, &l("ssm_a").v);
    let norm = &l("ssm_norm.weight").v;
    let (ls, hw, hb) = (
        &l("ssm_bd_logit_scale.weight").v,
        &l("ssm_bd_history.weight").v,
        &l("ssm_bd_history.bias").v,
    );
    let mixed: Vec<Vec<f64>> = u.iter().map(|x| matvec(l("attn_qkv.weight"), x)).collect();
    let z: Vec<Vec<f64>> = u.iter().map(|x| matvec(l("attn_gate.weight"), x)).collect();
    let g: Vec<Vec<f64>> = u
        .iter()
        .map(|x| {
            let a = matvec(l("ssm_alpha.weight"), x);
            (0..hv)
                .map(|h| {
                    let y = a[h] + dt[h] as f64;
                    let sp = if y > 20.0 { y } else { y.exp().ln_1p() };
                    sp * a_log[h] as f64
                })
                .collect()
        })
        .collect();
    // Row `idx` of the conv input: prefix/block rows, zeros before position 0
    // and past the end of the block (rows ≥ `end`).
    let row = |idx: isize, end: usize, cc: usize| -> f64 {
        if idx < 0 || idx as usize >= end {
            0.0
        } else {
            mixed[idx as usize][cc]
        }
    };
    let conv_at = |i: usize, two_sided: bool| -> Vec<f64> {
        (0..ch)
            .map(|cc| {
                let mut s = 0.0;
                for j in 0..kn {
                    let idx = i as isize - (kn as isize - 1) + j as isize;
                    s += conv_w[cc * kn + j] as f64 * row(idx, u.len(), cc);
                }
                if two_sided {
                    for j in 0..kr {
                        s += conv_r[cc * kr + j] as f64 * row((i + 1 + j) as isize, u.len(), cc);
                    }
                }
                silu(s)
            })
            .collect()
    };
    let heads = |cv: &[f64]| -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
        let q = (0..hk).map(|h| l2(&cv[h * d..(h + 1) * d], eps)).collect();
        let k = (0..hk)
            .map(|h| l2(&cv[(hk + h) * d..(hk + h + 1) * d], eps))
            .collect();
        (q, k)
    };
    let gated_out = |o: &[Vec<f64>], zi: &[f64]| -> Vec<f64> {
        let mut cat = vec![0.0; hv * d];
        for h in 0..hv {
            let ms = o[h].iter().map(|x| x * x).sum::<f64>() / d as f64;
            for j in 0..d {
                let zj = zi[h * d + j];
                cat[h * d + j] = o[h][j] / (ms + eps).sqrt() * norm[j] as f64 * silu(zj);
            }
        }
        matvec(l("ssm_out.weight"), &cat)
    };
    let qscale = 1.0 / (d as f64).sqrt();
    // S[h][i][j]: i key dim, j value dim.
    let mut s = vec![vec![vec![0.0f64; d]; d]; hv];
    let beta_w = l("ssm_beta.weight");
    let mut out = Vec::with_capacity(u.len());
    for t in 0..n {
        // The prefix conv sees only rows ≤ t (the block is not there yet).
        let cv = conv_at(t, false);
        let (q, k) = heads(&cv);
        let b = matvec(beta_w, &u[t]);
        let mut o = vec![vec![0.0; d]; hv];
        for h in 0..hv {
            let kh = h % hk;
            let v = &cv[2 * hk * d + h * d..2 * hk * d + (h + 1) * d];
            let (decay, beta) = (g[t][h].exp(), sig(b[h]));
            let sh = &mut s[h];
            sh.iter_mut().flatten().for_each(|x| *x *= decay);
            let m: Vec<f64> = (0..d)
                .map(|j| (0..d).map(|i| sh[i][j] * k[kh][i]).sum())
                .collect();
            for i in 0..d {
                for j in 0..d {
                    sh[i][j] += k[kh][i] * beta * (v[j] - m[j]);
                }
            }
            for j in 0..d {
                o[h][j] = (0..d).map(|i| sh[i][j] * q[kh][i] * qscale).sum();
            }
        }
        out.push(gated_out(&o, &z[t]));
    }
    // §3: the block, from the prefix state, two-sided conv.
    let blk: Vec<Vec<f64>> = (n..u.len()).map(|i| conv_at(i, true)).collect();
    let qk: Vec<_> = blk.iter().map(|cv| heads(cv)).collect();
    for (bi, i) in (n..u.len()).enumerate() {
        let mut o = vec![vec![0.0; d]; hv];
        for h in 0..hv {
            let kh = h % hk;
            let qh = &qk[bi].0[kh];
            let logits: Vec<f64> = qk
                .iter()
                .map(|(_, kj)| ls[h] as f64 * dot(qh, &kj[kh]))
                .collect();
            let p = softmax(&logits);
            let lam = sig(hw[h] as f64 * g[i][h] + hb[h] as f64);
            for j in 0..d {
                let hist: f64 = (0..d).map(|a| s[h][a][j] * qh[a] * qscale).sum();
                let o_blk: f64 = blk
                    .iter()
                    .zip(&p)
                    .map(|(cv, pj)| pj * cv[2 * hk * d + h * d + j])
                    .sum();
                o[h][j] = lam * hist + (1.0 - lam) * o_blk;
            }
        }
        out.push(gated_out(&o, &z[i]));
    }
    out
}

/// §2.2 for the prefix rows (causal), §3 for the block rows (every prefix
/// position and every block position); row p roped at `pos0 + p`.
fn attention(r: &Reference, il: usize, u: &[Vec<f64>], n: usize, pos0: usize) -> Vec<Vec<f64>> {
    let c = &r.cfg;
    let l = |s: &str| r.layer(il, s);
    let (d, nh, nkv) = (c.head_dim, c.n_head, c.n_head_kv);
    let eps = c.rms_eps as f64;
    let (qn, kn) = (&l("attn_q_norm.weight").v, &l("attn_k_norm.weight").v);
    let rope = |x: &mut [f64], p: usize| {
        let half = c.n_rot / 2;
        for i in 0..half {
            let th = p as f64 * (c.rope_base as f64).powf(-2.0 * i as f64 / c.n_rot as f64);
            let (a, b) = (x[i], x[i + half]);
            x[i] = a * th.cos() - b * th.sin();
            x[i + half] = a * th.sin() + b * th.cos();
        }
    };
    let mut qs = vec![];
    let mut gates = vec![];
    let mut ks = vec![];
    let mut vs = vec![];
    for (p, x) in u.iter().enumerate() {
        let qg = matvec(l("attn_q.weight"), x);
        let kr = matvec(l("attn_k.weight"), x);
        let heads_k: Vec<Vec<f64>> = (0..nkv)
            .map(|g| {
                let mut k = rmsnorm(&kr[g * d..(g + 1) * d], kn, eps);
                rope(&mut k, pos0 + p);
                k
            })
            .collect();
        let heads_q: Vec<Vec<f64>> = (0..nh)
            .map(|h| {
                let mut q = rmsnorm(&qg[h * 2 * d..h * 2 * d + d], qn, eps);
                rope(&mut q, pos0 + p);
                q
            })
            .collect();
        ks.push(heads_k);
        vs.push(matvec(l("attn_v.weight"), x));
        qs.push(heads_q);
        gates.push(qg);
    }
    (0..u.len())
        .map(|p| {
            let visible = if p < n { p + 1 } else { u.len() };
            let mut cat = vec![0.0; nh * d];
            for h in 0..nh {
                let g = h / (nh / nkv);
                let sc: Vec<f64> = (0..visible)
                    .map(|s| dot(&qs[p][h], &ks[s][g]) / (d as f64).sqrt())
                    .collect();
                let a = softmax(&sc);
                for j in 0..d {
                    let o: f64 = (0..visible).map(|s| a[s] * vs[s][g * d + j]).sum();
                    cat[h * d + j] = o * sig(gates[p][h * 2 * d + d + j]);
                }
            }
            matvec(l("attn_output.weight"), &cat)
        })
        .collect()
}

/// §2.3 for one row.
fn moe(r: &Reference, il: usize, x: &[f64]) -> Vec<f64> {
    let c = &r.cfg;
    let l = |s: &str| r.layer(il, s);
    let (ff, ffs, e) = (c.n_ff_exp, c.n_ff_shexp, c.n_embd);
    let p = softmax(&matvec(l("ffn_gate_inp.weight"), x));
    let mut order: Vec<usize> = (0..c.n_expert).collect();
    order.sort_by(|a, b| p[*b].total_cmp(&p[*a]).then(a.cmp(b)));
    let top = &order[..c.n_expert_used];
    let sum = top.iter().map(|&i| p[i]).sum::<f64>().max(6.1e-5);
    let ffn = |gw: &W, uw: &W, dw: &W, ex: usize, n: usize| -> Vec<f64> {
        let gg = matvec_rows(gw, ex * n, n, x);
        let uu = matvec_rows(uw, ex * n, n, x);
        let h: Vec<f64> = gg.iter().zip(&uu).map(|(a, b)| silu(*a) * b).collect();
        matvec_rows(dw, ex * e, e, &h)
    };
    let mut out = vec![0.0; e];
    for &ex in top {
        let y = ffn(
            l("ffn_gate_exps.weight"),
            l("ffn_up_exps.weight"),
            l("ffn_down_exps.weight"),
            ex,
            ff,
        );
        for (o, v) in out.iter_mut().zip(&y) {
            *o += p[ex] / sum * v;
        }
    }
    let sh = ffn(
        l("ffn_gate_shexp.weight"),
        l("ffn_up_shexp.weight"),
        l("ffn_down_shexp.weight"),
        0,
        ffs,
    );
    let gate = sig(matvec(l("ffn_gate_inp_shexp.weight"), x)[0]);
    for (o, v) in out.iter_mut().zip(&sh) {
        *o += gate * v;
    }
    out
}

fn embedding(r: &Reference, id: u32) -> Vec<f64> {
    let (e, id) = (r.cfg.n_embd, id as usize);
    r.get("token_embd.weight").v[id * e..(id + 1) * e]
        .iter()
        .map(|v| *v as f64)
        .collect()
}

fn output(r: &Reference) -> &W {
    r.w.get("output.weight")
        .unwrap_or_else(|| r.get("token_embd.weight"))
}

/// Logits of every block row: the prefix by §2, the block by §3.
fn reference_logits(r: &Reference, prefix: &[u32], block: &[u32]) -> Vec<f64> {
    let c = &r.cfg;
    let (eps, n) = (c.rms_eps as f64, prefix.len());
    let x = trunk(r, prefix, block);
    let on = &r.get("output_norm.weight").v;
    x[n..]
        .iter()
        .flat_map(|row| matvec(output(r), &rmsnorm(row, on, eps)))
        .collect()
}

/// The residual stream after the last layer: the prefix by §2, the block by
/// §3.
fn trunk(r: &Reference, prefix: &[u32], block: &[u32]) -> Vec<Vec<f64>> {
    let c = &r.cfg;
    let (eps, n) = (c.rms_eps as f64, prefix.len());
    let mut x: Vec<Vec<f64>> = prefix
        .iter()
        .chain(block)
        .map(|&id| embedding(r, id))
        .collect();
    for il in 0..c.n_layer {
        let an = &r.layer(il, "attn_norm.weight").v;
        let xn: Vec<Vec<f64>> = x.iter().map(|row| rmsnorm(row, an, eps)).collect();
        let y = match c.layer_kinds[il] {
            LayerKind::DeltaNet => gdn(r, il, &xn, n),
            LayerKind::Attention => attention(r, il, &xn, n, 0),
        };
        let pn = &r.layer(il, "post_attention_norm.weight").v;
        for (row, yr) in x.iter_mut().zip(&y) {
            row.iter_mut().zip(yr).for_each(|(a, b)| *a += b);
            let m = moe(r, il, &rmsnorm(row, pn, eps));
            row.iter_mut().zip(&m).for_each(|(a, b)| *a += b);
        }
    }
    x
}

/// §2.7: the MTP block's output `g` of every entry, entry p fed `tokens[p]`
/// and `hidden[p]` (causal attention over the entries, at positions
/// `pos0 + p`).
fn mtp_rows(r: &Reference, tokens: &[u32], hidden: &[Vec<f64>], pos0: usize) -> Vec<Vec<f64>> {
    let c = &r.cfg;
    let (eps, il) = (c.rms_eps as f64, c.n_layer);
    let l = |s: &str| r.layer(il, s);
    let mut x: Vec<Vec<f64>> = tokens
        .iter()
        .zip(hidden)
        .map(|(&id, h)| {
            let mut cat = rmsnorm(&embedding(r, id), &l("nextn.enorm.weight").v, eps);
            cat.extend(rmsnorm(h, &l("nextn.hnorm.weight").v, eps));
            matvec(l("nextn.eh_proj.weight"), &cat)
        })
        .collect();
    let an = &l("attn_norm.weight").v;
    let xn: Vec<Vec<f64>> = x.iter().map(|row| rmsnorm(row, an, eps)).collect();
    let y = attention(r, il, &xn, xn.len(), pos0);
    let pn = &l("post_attention_norm.weight").v;
    let sn = &l("nextn.shared_head_norm.weight").v;
    for (row, yr) in x.iter_mut().zip(&y) {
        row.iter_mut().zip(yr).for_each(|(a, b)| *a += b);
        let m = moe(r, il, &rmsnorm(row, pn, eps));
        row.iter_mut().zip(&m).for_each(|(a, b)| *a += b);
    }
    x.iter().map(|row| rmsnorm(row, sn, eps)).collect()
}

fn write(dir: &Path, preset: Preset, recipe: Recipe, mtp: bool) -> std::path::PathBuf {
    let path = dir.join(format!("{preset}-{recipe}.gguf"));
    let options = SynthOptions {
        arch: Arch::CloverMoe,
        preset,
        recipe,
        seed: 5,
    };
    match mtp {
        true => synth::plan_mtp(options),
        false => synth::plan(options),
    }
    .unwrap()
    .write(&path, None)
    .unwrap();
    path
}

/// Max |Δlogit| over the block rows for each D, and the largest |logit|.
fn compare(preset: Preset, recipe: Recipe, ds: &[usize]) -> Vec<(usize, f64, f64)> {
    let dir = tempfile::tempdir().unwrap();
    let file = GgufFile::open(&write(dir.path(), preset, recipe, false)).unwrap();
    let model = Model::load(&file).unwrap();
    let r = Reference::new(&file);
    let vocab = model.n_vocab() as u32;
    let mask = r.cfg.mask_token_id.expect("clover files name a mask token");
    let prefix: Vec<u32> = (0..6u32).map(|i| (i * 97 + 13) % (vocab - 8)).collect();
    ds.iter()
        .map(|&d| {
            let mut blk = vec![mask; d + 1];
            blk[0] = (d as u32 * 31 + 7) % (vocab - 8);
            let mut o = StateOptions::new(64);
            o.max_batch = 16;
            let mut st = model.new_state(o).unwrap();
            model.forward(&mut st, &prefix, 0, LogitsFor::Last).unwrap();
            let got = model
                .forward_diffusion(&mut st, &blk, prefix.len(), LogitsFor::All)
                .unwrap()
                .to_vec();
            let want = reference_logits(&r, &prefix, &blk);
            assert_eq!(got.len(), want.len());
            let err = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (*a as f64 - b).abs())
                .fold(0.0, f64::max);
            let big = want.iter().map(|a| a.abs()).fold(0.0, f64::max);
            eprintln!("{preset} {recipe} D {d}: max |Δlogit| {err:.2e} (max |logit| {big:.2})");
            (d, err, big)
        })
        .collect()
}

fn check(preset: Preset, recipe: Recipe, tol: f64) {
    for (d, err, big) in compare(preset, recipe, &[1, 4, 15]) {
        // The comparison is not vacuous: the logits are far from zero.
        assert!(big > 0.5, "{preset} D {d}: logits all near zero");
        assert!(err < tol, "{preset} {recipe} D {d}: max |Δlogit| {err:e}");
    }
}

#[test]
fn diffusion_matches_the_plain_reference_on_the_tiny_f32_file() {
    check(Preset::Tiny, Recipe::F32, 1e-4);
}

#[test]
fn diffusion_matches_the_plain_reference_on_the_small_f32_file() {
    check(Preset::Small, Recipe::F32, 1e-4);
}

#[test]
fn diffusion_matches_the_plain_reference_on_the_tiny_q4_k_m_file() {
    check(Preset::Tiny, Recipe::Q4KM, 0.15);
}

#[test]
fn diffusion_matches_the_plain_reference_on_the_small_q4_k_m_file() {
    check(Preset::Small, Recipe::Q4KM, 1.5);
}

/// Max |Δlogit| of the MTP block's first draft and two chained steps
/// (`Model::mtp_sync`, `Model::mtp_step`) against §2.7 in f64, the largest
/// |logit|, and the first draft's logits. With `skip` > 0 the cache skips
/// the first `skip` entries (`Model::mtp_skip`): the reference's entries
/// start there, at their own positions.
fn compare_mtp(preset: Preset, recipe: Recipe, skip: usize) -> (f64, f64, Vec<f32>) {
    let dir = tempfile::tempdir().unwrap();
    let file = GgufFile::open(&write(dir.path(), preset, recipe, true)).unwrap();
    let mut model = Model::load(&file).unwrap();
    model.mtp = true;
    assert!(model.has_mtp());
    let r = Reference::new(&file);
    let c = &r.cfg;
    let (vocab, eps) = (model.n_vocab() as u32, c.rms_eps as f64);
    // Prefix t_0 … t_{n−1} in the trunk, the anchor t_n, then two drafts.
    let history: Vec<u32> = (0..7u32).map(|i| (i * 89 + 11) % (vocab - 8)).collect();
    let chain = [(vocab / 3), (vocab / 5)];
    let n = history.len() - 1;
    let mut o = StateOptions::new(64);
    o.max_batch = 4;
    let mut st = model.new_state(o).unwrap();
    model
        .forward(&mut st, &history[..n], 0, LogitsFor::Last)
        .unwrap();
    model.mtp_skip(&mut st, &history, skip).unwrap();
    let mut got = vec![model.mtp_sync(&mut st, &history).unwrap().to_vec()];
    for &t in &chain {
        got.push(model.mtp_step(&mut st, t).unwrap().to_vec());
    }
    let on = &r.get("output_norm.weight").v;
    let mut hidden = vec![vec![0.0; c.n_embd]];
    hidden.extend(
        trunk(&r, &history[..n], &[])
            .iter()
            .map(|x| rmsnorm(x, on, eps)),
    );
    let mut tokens = history.clone();
    let mut want = Vec::new();
    for step in 0..=chain.len() {
        let g = mtp_rows(&r, &tokens[skip..], &hidden[skip..], skip);
        let last = g.last().unwrap();
        want.push(matvec(output(&r), last));
        if let Some(&t) = chain.get(step) {
            tokens.push(t);
            hidden.push(last.clone());
        }
    }
    let (mut err, mut big) = (0.0f64, 0.0f64);
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.len(), w.len());
        for (a, b) in g.iter().zip(w) {
            err = err.max((*a as f64 - b).abs());
            big = big.max(b.abs());
        }
    }
    eprintln!("{preset} {recipe} MTP (skip {skip}): max |Δlogit| {err:.2e} (max |logit| {big:.2})");
    (err, big, got.swap_remove(0))
}

#[test]
fn mtp_matches_the_plain_reference_on_the_tiny_f32_file() {
    let (err, big, _) = compare_mtp(Preset::Tiny, Recipe::F32, 0);
    assert!(big > 0.5, "logits all near zero");
    assert!(err < 1e-4, "max |Δlogit| {err:e}");
}

#[test]
fn mtp_matches_the_plain_reference_on_the_small_f32_file() {
    let (err, big, _) = compare_mtp(Preset::Small, Recipe::F32, 0);
    assert!(big > 0.5, "logits all near zero");
    assert!(err < 1e-4, "max |Δlogit| {err:e}");
}

#[test]
fn mtp_matches_the_plain_reference_on_the_tiny_q4_k_m_file() {
    let (err, big, _) = compare_mtp(Preset::Tiny, Recipe::Q4KM, 0);
    assert!(big > 0.5, "logits all near zero");
    assert!(err < 0.15, "max |Δlogit| {err:e}");
}

/// A cache that skipped entries (a bounded catch-up) attends to the entries
/// after the skip only, roped where its rows start: the same scores as at
/// the entries' own positions, since rope depends on distances alone.
#[test]
fn mtp_after_a_skip_matches_the_reference_over_the_entries_after_it() {
    let (err, big, skipped) = compare_mtp(Preset::Tiny, Recipe::F32, 3);
    assert!(big > 0.5, "logits all near zero");
    assert!(err < 1e-4, "max |Δlogit| {err:e}");
    // The skip changed what the draft sees.
    let (_, _, whole) = compare_mtp(Preset::Tiny, Recipe::F32, 0);
    let diff = skipped
        .iter()
        .zip(&whole)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(diff > 1e-2, "skipping entries changed no logit ({diff:e})");
}
