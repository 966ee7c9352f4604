//! The GDN mixer against a direct transcription of docs/DESIGN.md §2.1 in f64 plain
//! loops (no shared code with the engine).

use crate::model::config::ModelConfig;
use crate::model::cx::Cx;
use crate::model::deltanet::{self, DeltaNetScratch};
use crate::model::forward::Model;
use crate::model::linear::MatScratch;
use crate::model::state::DeltaNetState;
use crate::model::tiny::*;
use crate::model::weights::MixerWeights;

/// §2.1, one token, natural state layout `S[h][i][j]`.
pub(crate) struct Reference {
    pub(crate) cfg: ModelConfig,
    pub(crate) w_qkv: Vec<f32>,
    pub(crate) w_gate: Vec<f32>,
    pub(crate) w_beta: Vec<f32>,
    pub(crate) w_alpha: Vec<f32>,
    pub(crate) conv: Vec<f32>,
    pub(crate) dt: Vec<f32>,
    pub(crate) a: Vec<f32>,
    pub(crate) norm: Vec<f32>,
    pub(crate) w_out: Vec<f32>,
    pub(crate) hist: Vec<Vec<f64>>,
    pub(crate) s: Vec<Vec<Vec<f64>>>,
}

pub(crate) fn matvec(w: &[f32], x: &[f64], n_out: usize) -> Vec<f64> {
    let n_in = x.len();
    (0..n_out)
        .map(|o| (0..n_in).map(|i| w[o * n_in + i] as f64 * x[i]).sum())
        .collect()
}

pub(crate) fn sig(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

impl Reference {
    pub(crate) fn new(m: &TinyModel, il: usize) -> Reference {
        let v = |s: &str| m.values(&format!("blk.{il}.{s}"));
        let cfg = m.cfg.clone();
        let d = cfg.ssm_head_dim;
        Reference {
            w_qkv: v("attn_qkv.weight"),
            w_gate: v("attn_gate.weight"),
            w_beta: v("ssm_beta.weight"),
            w_alpha: v("ssm_alpha.weight"),
            conv: v("ssm_conv1d.weight"),
            dt: v("ssm_dt.bias"),
            a: v("ssm_a"),
            norm: v("ssm_norm.weight"),
            w_out: v("ssm_out.weight"),
            hist: vec![vec![0.0; cfg.ssm_conv_channels()]; cfg.ssm_conv_kernel - 1],
            s: vec![vec![vec![0.0; d]; d]; cfg.ssm_n_v_heads],
            cfg,
        }
    }

    pub(crate) fn step(&mut self, u: &[f32]) -> Vec<f64> {
        let c = &self.cfg;
        let (hk, hv, d) = (c.ssm_n_k_heads, c.ssm_n_v_heads, c.ssm_head_dim);
        let ch = c.ssm_conv_channels();
        let kn = c.ssm_conv_kernel;
        let eps = c.rms_eps as f64;
        let u: Vec<f64> = u.iter().map(|x| *x as f64).collect();
        // 1.
        let mixed = matvec(&self.w_qkv, &u, ch);
        let z = matvec(&self.w_gate, &u, hv * d);
        let b = matvec(&self.w_beta, &u, hv);
        let a = matvec(&self.w_alpha, &u, hv);
        // 2.
        let beta: Vec<f64> = b.iter().map(|x| sig(*x)).collect();
        let g: Vec<f64> = (0..hv)
            .map(|h| {
                let x = a[h] + self.dt[h] as f64;
                let sp = if x > 20.0 { x } else { (1.0 + x.exp()).ln() };
                sp * self.a[h] as f64
            })
            .collect();
        // 3. window: hist[0] is t−3, hist[2] is t−1; tap 3 is the current token.
        let mut conv = vec![0.0f64; ch];
        for (cc, out) in conv.iter_mut().enumerate() {
            let mut s = 0.0;
            for j in 0..kn {
                let x = if j < kn - 1 {
                    self.hist[j][cc]
                } else {
                    mixed[cc]
                };
                s += self.conv[cc * kn + j] as f64 * x;
            }
            *out = s * sig(s);
        }
        self.hist.remove(0);
        self.hist.push(mixed);
        // 4.
        let l2 = |x: &[f64]| -> Vec<f64> {
            let n = (x.iter().map(|v| v * v).sum::<f64>() + eps).sqrt();
            x.iter().map(|v| v / n).collect()
        };
        let qs: Vec<Vec<f64>> = (0..hk)
            .map(|h| {
                l2(&conv[h * d..(h + 1) * d])
                    .iter()
                    .map(|x| x / (d as f64).sqrt())
                    .collect()
            })
            .collect();
        let ks: Vec<Vec<f64>> = (0..hk)
            .map(|h| l2(&conv[(hk + h) * d..(hk + h + 1) * d]))
            .collect();
        // 5. + 6.
        let mut cat = vec![0.0f64; hv * d];
        for h in 0..hv {
            let kh = h % hk;
            let (q, k) = (&qs[kh], &ks[kh]);
            let v = &conv[2 * hk * d + h * d..2 * hk * d + (h + 1) * d];
            let s = &mut self.s[h];
            let decay = g[h].exp();
            for row in s.iter_mut() {
                for x in row.iter_mut() {
                    *x *= decay;
                }
            }
            let m: Vec<f64> = (0..d)
                .map(|j| (0..d).map(|i| s[i][j] * k[i]).sum())
                .collect();
            let delta: Vec<f64> = (0..d).map(|j| beta[h] * (v[j] - m[j])).collect();
            for i in 0..d {
                for j in 0..d {
                    s[i][j] += k[i] * delta[j];
                }
            }
            let o: Vec<f64> = (0..d)
                .map(|j| (0..d).map(|i| s[i][j] * q[i]).sum())
                .collect();
            let ms = o.iter().map(|x| x * x).sum::<f64>() / d as f64;
            let r = 1.0 / (ms + eps).sqrt();
            for j in 0..d {
                let zj = z[h * d + j];
                cat[h * d + j] = o[j] * r * self.norm[j] as f64 * zj * sig(zj);
            }
        }
        matvec(&self.w_out, &cat, c.n_embd)
    }
}

fn gdn_weights<'a>(m: &'a Model<'a>, il: usize) -> &'a crate::model::weights::DeltaNetWeights<'a> {
    match &m.weights.layers[il].mixer {
        MixerWeights::DeltaNet(w) => w,
        _ => panic!("layer {il} is not GDN"),
    }
}

#[test]
fn one_token_steps_match_the_design_transcription() {
    let tm = TinyModel::random(tiny_config(2, 2), 11);
    let model = tm.model();
    let cfg = &model.config;
    let w = gdn_weights(&model, 0);
    let kt = kernels::KernelTable::chosen();
    let mut reference = Reference::new(&tm, 0);
    let mut state = DeltaNetState::new(cfg);
    let mut sc = DeltaNetScratch::new(cfg, 1);
    let mut lin = MatScratch::new(1, 64);
    let mut r = Rng::new(3);
    let mut out = vec![0.0f32; cfg.n_embd];
    for step in 0..6 {
        let u = r.vec(cfg.n_embd, 1.0);
        deltanet::forward(
            Cx {
                kt,
                mode: kernels::Mode::Decode,
                cfg,
            },
            w,
            &mut state,
            None,
            &u,
            1,
            &mut sc,
            &mut lin,
            &mut out,
            None,
        );
        let want = reference.step(&u);
        for (i, (&got, &want)) in out.iter().zip(&want).enumerate() {
            assert!(
                (got as f64 - want).abs() <= 2e-5 * (1.0 + want.abs()),
                "step {step} out[{i}]: {got} vs {want}"
            );
        }
    }
    // The state itself, transposed: ssm[h][j][i] = S[h][i][j].
    let d = cfg.ssm_head_dim;
    for h in 0..cfg.ssm_n_v_heads {
        for i in 0..d {
            for j in 0..d {
                let got = state.ssm[(h * d + j) * d + i] as f64;
                let want = reference.s[h][i][j];
                assert!((got - want).abs() < 1e-5, "S[{h}][{i}][{j}]");
            }
        }
    }
}

#[test]
fn a_batch_advances_state_exactly_like_single_tokens() {
    let tm = TinyModel::random(tiny_config(2, 2), 12);
    let model = tm.model();
    let cfg = &model.config;
    let w = gdn_weights(&model, 0);
    let kt = kernels::KernelTable::chosen();
    let e = cfg.n_embd;
    let mut r = Rng::new(4);
    let u = r.vec(5 * e, 1.0);
    // Singles.
    let mut s1 = DeltaNetState::new(cfg);
    let mut sc = DeltaNetScratch::new(cfg, 5);
    let mut lin = MatScratch::new(5, 64);
    let mut singles = vec![0.0f32; 5 * e];
    for t in 0..5 {
        deltanet::forward(
            Cx {
                kt,
                mode: kernels::Mode::Decode,
                cfg,
            },
            w,
            &mut s1,
            None,
            &u[t * e..(t + 1) * e],
            1,
            &mut sc,
            &mut lin,
            &mut singles[t * e..],
            None,
        );
    }
    // Batches of 2 (shorter than the conv window) and 3.
    let mut s2 = DeltaNetState::new(cfg);
    let mut batched = vec![0.0f32; 5 * e];
    deltanet::forward(
        Cx {
            kt,
            mode: kernels::Mode::Decode,
            cfg,
        },
        w,
        &mut s2,
        None,
        &u[..2 * e],
        2,
        &mut sc,
        &mut lin,
        &mut batched[..2 * e],
        None,
    );
    deltanet::forward(
        Cx {
            kt,
            mode: kernels::Mode::Decode,
            cfg,
        },
        w,
        &mut s2,
        None,
        &u[2 * e..],
        3,
        &mut sc,
        &mut lin,
        &mut batched[2 * e..],
        None,
    );
    assert!(max_abs_diff(&singles, &batched) < 1e-6);
    assert!(max_abs_diff(&s1.ssm, &s2.ssm) < 1e-6);
    assert_eq!(s1.conv, s2.conv);
}

/// A prompt's conv (enough rows to run in parallel on transposed taps)
/// gives every row the bits the same rows get one token at a time, and
/// leaves the same window.
#[test]
fn the_conv_of_many_rows_is_the_conv_of_each_row_alone() {
    let (ch, k, t) = (264, 4, 140); // t·ch past the parallel threshold
    assert!(t * ch >= crate::model::ops::PAR_MIN_ELEMS);
    let mut r = Rng::new(31);
    let w = r.vec(ch * k, 1.0);
    let mixed = r.vec(t * ch, 2.0);
    let start = r.vec((k - 1) * ch, 1.0);
    let win_start = start.clone();
    let (mut win_all, mut win_one) = (start.clone(), start);
    let mut all = vec![0.0f32; t * ch];
    conv_silu(&w, k, &mut win_all, &mixed, ch, &mut all);
    let mut one = vec![0.0f32; t * ch];
    for (x, o) in mixed.chunks_exact(ch).zip(one.chunks_exact_mut(ch)) {
        conv_silu(&w, k, &mut win_one, x, ch, o);
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&all), bits(&one));
    assert_eq!(win_all, win_one);
    // With the taps the weights keep transposed: the same bits, one row at a
    // time (serial) and all rows (in parallel).
    let wt = crate::model::ops::by_tap(&w, k, ch);
    let mut win_t = win_start.clone();
    let mut all_t = vec![0.0f32; t * ch];
    deltanet::conv_silu_t(&w, &wt, k, &mut win_t, &mixed, ch, &mut all_t);
    assert_eq!(bits(&all_t), bits(&all));
    let mut win_t = win_start;
    let mut one_t = vec![0.0f32; t * ch];
    for (x, o) in mixed.chunks_exact(ch).zip(one_t.chunks_exact_mut(ch)) {
        deltanet::conv_silu_t(&w, &wt, k, &mut win_t, x, ch, o);
    }
    assert_eq!(bits(&one_t), bits(&all));
    assert_eq!(win_t, win_all);
}

#[test]
fn conv_tap_three_multiplies_the_current_token() {
    // One channel, kernel 4, taps [1, 10, 100, 1000]: out_t (pre-silu) =
    // x_{t−3} + 10 x_{t−2} + 100 x_{t−1} + 1000 x_t. Pick inputs so that silu
    // is invertible to read the sum back.
    let w = [1.0f32, 10.0, 100.0, 1000.0];
    let mut window = [0.0f32; 3];
    let mixed = [0.001f32, 0.002];
    let mut out = [0.0f32; 2];
    conv_silu(&w, 4, &mut window, &mixed, 1, &mut out);
    let pre0 = 1000.0 * 0.001f64;
    let pre1 = 100.0 * 0.001 + 1000.0 * 0.002f64;
    let silu = |x: f64| x / (1.0 + (-x).exp());
    assert!((out[0] as f64 - silu(pre0)).abs() < 1e-6);
    assert!((out[1] as f64 - silu(pre1)).abs() < 1e-6);
    assert_eq!(window, [0.0, 0.001, 0.002]);
}

#[test]
fn chunked_form_equals_token_by_token_across_chunk_boundaries() {
    let tm = TinyModel::random(tiny_config(2, 2), 13);
    let model = tm.model();
    let cfg = &model.config;
    let w = gdn_weights(&model, 0);
    let kt = kernels::KernelTable::chosen();
    let e = cfg.n_embd;
    let n = 150; // chunks of 64, 64, 22
    let mut r = Rng::new(14);
    let u = r.vec(n * e, 1.0);
    let mut lin = MatScratch::new(n, 64);
    let mut outs = vec![];
    let mut states = vec![];
    for chunked in [false, true] {
        let mut st = DeltaNetState::new(cfg);
        let mut sc = DeltaNetScratch::new(cfg, n);
        sc.chunked = chunked;
        let mut out = vec![0.0f32; n * e];
        // Two calls: the second starts from a non-zero state.
        deltanet::forward(
            Cx {
                kt,
                mode: kernels::Mode::Decode,
                cfg,
            },
            w,
            &mut st,
            None,
            &u[..70 * e],
            70,
            &mut sc,
            &mut lin,
            &mut out[..70 * e],
            None,
        );
        deltanet::forward(
            Cx {
                kt,
                mode: kernels::Mode::Decode,
                cfg,
            },
            w,
            &mut st,
            None,
            &u[70 * e..],
            80,
            &mut sc,
            &mut lin,
            &mut out[70 * e..],
            None,
        );
        outs.push(out);
        states.push(st);
    }
    let d_out = max_abs_diff(&outs[0], &outs[1]);
    let d_state = max_abs_diff(&states[0].ssm, &states[1].ssm);
    assert!(d_out < 1e-5, "outputs differ by {d_out}");
    assert!(d_state < 1e-5, "states differ by {d_state}");
    assert!(
        states[0].ssm.iter().any(|x| x.abs() > 0.1),
        "state stayed trivial"
    );
}

/// Causal depthwise conv of `t` tokens of `mixed` with taps `w[c][j]`
/// (`j = K−1` multiplies the current token), then silu; advances `window`.
/// Several tokens are split across the pool (each row as alone).
pub(crate) fn conv_silu(
    w: &[f32],
    k: usize,
    window: &mut [f32],
    mixed: &[f32],
    ch: usize,
    out: &mut [f32],
) {
    deltanet::conv_silu_t(w, &[], k, window, mixed, ch, out);
}
