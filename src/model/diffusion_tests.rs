//! The diffusion forward (docs/DESIGN.md §3) against a direct f64 transcription of
//! §3 (plain loops, no engine code; the prefix runs through the §2 references
//! of the sibling modules), plus the §3 properties: the pass leaves the state
//! bit-identical, zero right taps give the AR conv, λ = 1 gives Sᵀq, and the
//! attention output does not depend on the order its queries are evaluated.

use crate::model::config::LayerKind;
use crate::model::cx::Cx;
use crate::model::deltanet::tests::{matvec, sig, Reference};
use crate::model::diffusion::{conv_two_sided, DiffusionKnobs};
use crate::model::forward::Model;
use crate::model::state::StateOptions;
use crate::model::tiny::*;
use crate::model::{ForwardError, LogitsFor};

fn norm64(x: &[f64], w: &[f32], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|a| a * a).sum::<f64>() / x.len() as f64;
    x.iter()
        .zip(w)
        .map(|(a, b)| a / (ms + eps).sqrt() * *b as f64)
        .collect()
}

fn l2(x: &[f64], eps: f64) -> Vec<f64> {
    let n = (x.iter().map(|v| v * v).sum::<f64>() + eps).sqrt();
    x.iter().map(|v| v / n).collect()
}

/// §3 GDN block over the `t` rows of `u`, from the prefix state of `r`.
fn gdn_block_ref(tm: &TinyModel, il: usize, r: &Reference, u: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let c = &tm.cfg;
    let v = |s: &str| tm.values(&format!("blk.{il}.{s}"));
    let (wr, ls, hw, hb) = (
        v("ssm_conv1d.weight_right"),
        v("ssm_bd_logit_scale.weight"),
        v("ssm_bd_history.weight"),
        v("ssm_bd_history.bias"),
    );
    let (hk, hv, d) = (c.ssm_n_k_heads, c.ssm_n_v_heads, c.ssm_head_dim);
    let (ch, kn, kr) = (
        c.ssm_conv_channels(),
        c.ssm_conv_kernel,
        c.ssm_conv_kernel_right,
    );
    let eps = c.rms_eps as f64;
    let t = u.len();
    let mixed: Vec<Vec<f64>> = u.iter().map(|x| matvec(&r.w_qkv, x, ch)).collect();
    let z: Vec<Vec<f64>> = u.iter().map(|x| matvec(&r.w_gate, x, hv * d)).collect();
    let g: Vec<Vec<f64>> = u
        .iter()
        .map(|x| {
            let a = matvec(&r.w_alpha, x, hv);
            (0..hv)
                .map(|h| {
                    let y = a[h] + r.dt[h] as f64;
                    let sp = if y > 20.0 { y } else { (1.0 + y.exp()).ln() };
                    sp * r.a[h] as f64
                })
                .collect()
        })
        .collect();
    // Row index i−3+j of concat(window, block): window row kn−1+idx when < 0.
    let row = |idx: isize, cc: usize| -> f64 {
        if idx < 0 {
            r.hist[(kn as isize - 1 + idx) as usize][cc]
        } else if (idx as usize) < t {
            mixed[idx as usize][cc]
        } else {
            0.0
        }
    };
    let conv: Vec<Vec<f64>> = (0..t)
        .map(|i| {
            (0..ch)
                .map(|cc| {
                    let mut s = 0.0;
                    for j in 0..kn {
                        s += r.conv[cc * kn + j] as f64
                            * row(i as isize - (kn as isize - 1) + j as isize, cc);
                    }
                    for j in 0..kr {
                        s += wr[cc * kr + j] as f64 * row(i as isize + 1 + j as isize, cc);
                    }
                    s * sig(s)
                })
                .collect()
        })
        .collect();
    let qh: Vec<Vec<Vec<f64>>> = conv
        .iter()
        .map(|cv| (0..hk).map(|h| l2(&cv[h * d..(h + 1) * d], eps)).collect())
        .collect();
    let kh: Vec<Vec<Vec<f64>>> = conv
        .iter()
        .map(|cv| {
            (0..hk)
                .map(|h| l2(&cv[(hk + h) * d..(hk + h + 1) * d], eps))
                .collect()
        })
        .collect();
    (0..t)
        .map(|i| {
            let mut cat = vec![0.0f64; hv * d];
            for h in 0..hv {
                let kk = h % hk;
                let q: Vec<f64> = qh[i][kk].iter().map(|x| x / (d as f64).sqrt()).collect();
                let hist: Vec<f64> = (0..d)
                    .map(|j| (0..d).map(|a| r.s[h][a][j] * q[a]).sum())
                    .collect();
                let logits: Vec<f64> = (0..t)
                    .map(|j| {
                        ls[h] as f64 * (0..d).map(|a| qh[i][kk][a] * kh[j][kk][a]).sum::<f64>()
                    })
                    .collect();
                let mx = logits.iter().cloned().fold(f64::MIN, f64::max);
                let ex: Vec<f64> = logits.iter().map(|x| (x - mx).exp()).collect();
                let zs: f64 = ex.iter().sum();
                let lam = sig(hw[h] as f64 * g[i][h] + hb[h] as f64);
                let o: Vec<f64> = (0..d)
                    .map(|jv| {
                        let blk: f64 = (0..t)
                            .map(|j| ex[j] / zs * conv[j][2 * hk * d + h * d + jv])
                            .sum();
                        lam * hist[jv] + (1.0 - lam) * blk
                    })
                    .collect();
                let ms = o.iter().map(|x| x * x).sum::<f64>() / d as f64;
                for jv in 0..d {
                    let zj = z[i][h * d + jv];
                    cat[h * d + jv] = o[jv] / (ms + eps).sqrt() * r.norm[jv] as f64 * zj * sig(zj);
                }
            }
            matvec(&r.w_out, &cat, c.n_embd)
        })
        .collect()
}

/// §2.2 for the prefix rows (causal), §3 for the block rows (all cached
/// positions and every block position).
fn attention_ref(tm: &TinyModel, il: usize, u: &[Vec<f64>], n: usize) -> Vec<Vec<f64>> {
    let c = &tm.cfg;
    let v = |s: &str| tm.values(&format!("blk.{il}.{s}"));
    let (wq, wk, wv, wo) = (
        v("attn_q.weight"),
        v("attn_k.weight"),
        v("attn_v.weight"),
        v("attn_output.weight"),
    );
    let (qn, kn) = (v("attn_q_norm.weight"), v("attn_k_norm.weight"));
    let (d, nh, nkv) = (c.head_dim, c.n_head, c.n_head_kv);
    let eps = c.rms_eps as f64;
    let rope = |x: &mut [f64], p: usize| {
        let half = c.n_rot / 2;
        for i in 0..half {
            let th = p as f64 * (c.rope_base as f64).powf(-2.0 * i as f64 / c.n_rot as f64);
            let (a, b) = (x[i], x[i + half]);
            x[i] = a * th.cos() - b * th.sin();
            x[i + half] = a * th.sin() + b * th.cos();
        }
    };
    let rows = u.len();
    let mut qs = vec![];
    let mut gates = vec![];
    let mut ks = vec![];
    let mut vs = vec![];
    for (p, x) in u.iter().enumerate() {
        let qg = matvec(&wq, x, nh * 2 * d);
        let kr = matvec(&wk, x, nkv * d);
        ks.push(
            (0..nkv)
                .map(|g| {
                    let mut k = norm64(&kr[g * d..(g + 1) * d], &kn, eps);
                    rope(&mut k, p);
                    k
                })
                .collect::<Vec<_>>(),
        );
        vs.push(matvec(&wv, x, nkv * d));
        qs.push(
            (0..nh)
                .map(|h| {
                    let mut q = norm64(&qg[h * 2 * d..h * 2 * d + d], &qn, eps);
                    rope(&mut q, p);
                    q
                })
                .collect::<Vec<_>>(),
        );
        gates.push(qg);
    }
    (0..rows)
        .map(|p| {
            let visible = if p < n { p + 1 } else { rows };
            let mut cat = vec![0.0f64; nh * d];
            for h in 0..nh {
                let g = h / (nh / nkv);
                let sc: Vec<f64> = (0..visible)
                    .map(|s| {
                        (0..d).map(|i| qs[p][h][i] * ks[s][g][i]).sum::<f64>() / (d as f64).sqrt()
                    })
                    .collect();
                let mx = sc.iter().cloned().fold(f64::MIN, f64::max);
                let ex: Vec<f64> = sc.iter().map(|s| (s - mx).exp()).collect();
                let z: f64 = ex.iter().sum();
                for j in 0..d {
                    let a: f64 = (0..visible).map(|s| ex[s] / z * vs[s][g * d + j]).sum();
                    cat[h * d + j] = a * sig(gates[p][h * 2 * d + d + j]);
                }
            }
            matvec(&wo, &cat, c.n_embd)
        })
        .collect()
}

/// Logits of every block row: prefix by §2, block by §3.
fn reference_block_logits(tm: &TinyModel, prefix: &[u32], block: &[u32]) -> Vec<f64> {
    let c = &tm.cfg;
    let e = c.n_embd;
    let eps = c.rms_eps as f64;
    let n = prefix.len();
    let embd = tm.values("token_embd.weight");
    let mut x: Vec<Vec<f64>> = prefix
        .iter()
        .chain(block)
        .map(|&id| {
            embd[id as usize * e..(id as usize + 1) * e]
                .iter()
                .map(|v| *v as f64)
                .collect()
        })
        .collect();
    for il in 0..c.n_layer {
        let v = |s: &str| tm.values(&format!("blk.{il}.{s}"));
        // The engine rounds normed inputs to f32 before each matmul; so does
        // the reference (as the §2 references do).
        let xn: Vec<Vec<f64>> = x
            .iter()
            .map(|r| {
                norm64(r, &v("attn_norm.weight"), eps)
                    .iter()
                    .map(|a| *a as f32 as f64)
                    .collect()
            })
            .collect();
        let y: Vec<Vec<f64>> = match c.layer_kinds[il] {
            LayerKind::DeltaNet => {
                let mut r = Reference::new(tm, il);
                let mut out: Vec<Vec<f64>> = xn[..n]
                    .iter()
                    .map(|u| r.step(&u.iter().map(|a| *a as f32).collect::<Vec<_>>()))
                    .collect();
                out.extend(gdn_block_ref(tm, il, &r, &xn[n..]));
                out
            }
            LayerKind::Attention => attention_ref(tm, il, &xn, n),
        };
        for (a, b) in x.iter_mut().zip(&y) {
            for (p, q) in a.iter_mut().zip(b) {
                *p += q;
            }
        }
        let xn: Vec<f32> = x
            .iter()
            .flat_map(|r| norm64(r, &v("post_attention_norm.weight"), eps))
            .map(|a| a as f32)
            .collect();
        let y = crate::model::moe::tests::reference(tm, il, &xn);
        for (a, b) in x.iter_mut().flatten().zip(&y) {
            *a += b;
        }
    }
    let out = tm.values("output.weight");
    let on = tm.values("output_norm.weight");
    x[n..]
        .iter()
        .flat_map(|r| {
            let h: Vec<f32> = norm64(r, &on, eps).iter().map(|a| *a as f32).collect();
            (0..TINY_VOCAB)
                .map(|o| {
                    (0..e)
                        .map(|i| out[o * e + i] as f64 * h[i] as f64)
                        .sum::<f64>()
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

const PREFIX: [u32; 5] = [3, 17, 42, 0, 31];

fn opts() -> StateOptions {
    let mut o = StateOptions::new(32);
    o.max_batch = 16;
    o
}

fn block(d: usize, anchor: u32) -> Vec<u32> {
    let mut b = vec![TINY_MASK; d + 1];
    b[0] = anchor;
    b
}

fn prefilled<'m>(model: &Model<'m>) -> crate::model::State {
    let mut st = model.new_state(opts()).unwrap();
    model.forward(&mut st, &PREFIX, 0, LogitsFor::Last).unwrap();
    st
}

#[test]
fn diffusion_logits_match_the_design_transcription() {
    for (layers, interval, seed) in [(4, 2, 5u64), (3, 4, 9), (4, 4, 13)] {
        let tm = TinyModel::random(tiny_config(layers, interval), seed);
        let model = tm.model();
        // d = 15: a block of `BLOCK_PROMPT_ROWS` rows, on the prompt kernels.
        for d in [1usize, 3, 7, 15] {
            // A block with masks, and one with arbitrary drafts.
            for blk in [
                block(d, 7),
                (0..=d as u32).map(|i| (i * 13 + 2) % 49).collect(),
            ] {
                let mut st = prefilled(&model);
                let got = model
                    .forward_diffusion(&mut st, &blk, PREFIX.len(), LogitsFor::All)
                    .unwrap()
                    .to_vec();
                let want = reference_block_logits(&tm, &PREFIX, &blk);
                let err = got
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (*a as f64 - b).abs())
                    .fold(0.0, f64::max);
                assert!(err < 2e-4, "layers {layers} d {d}: max error {err}");
            }
        }
    }
}

#[test]
fn diffusion_with_an_empty_prefix_matches_the_transcription() {
    let tm = TinyModel::random(tiny_config(4, 2), 21);
    let model = tm.model();
    let mut st = model.new_state(opts()).unwrap();
    let blk = block(5, 11);
    let got = model
        .forward_diffusion(&mut st, &blk, 0, LogitsFor::All)
        .unwrap()
        .to_vec();
    let want = reference_block_logits(&tm, &[], &blk);
    for (a, b) in got.iter().zip(&want) {
        assert!((*a as f64 - b).abs() < 2e-4, "{a} vs {b}");
    }
}

/// KV bytes of every attention layer at positions `0..n`.
fn kv_bytes(st: &crate::model::State, layers: usize, n: usize, nkv: usize) -> Vec<u8> {
    let mut out = vec![];
    for l in 0..layers {
        for p in 0..n {
            for g in 0..nkv {
                out.extend_from_slice(st.kv.k_head(l, p, g));
                out.extend_from_slice(st.kv.v_head(l, p, g));
            }
        }
    }
    out
}

#[test]
fn the_diffusion_pass_leaves_kv_cache_conv_windows_and_states_bit_identical() {
    let tm = TinyModel::random(tiny_config(4, 2), 33);
    let model = tm.model();
    let mut st = prefilled(&model);
    let n_attn = tm.cfg.n_attention_layers();
    let cap = opts().n_ctx;
    let rec = st.recurrent.clone();
    let kv = kv_bytes(&st, n_attn, cap, tm.cfg.n_head_kv);
    let first = model
        .forward_diffusion(&mut st, &block(9, 4), PREFIX.len(), LogitsFor::All)
        .unwrap()
        .to_vec();
    assert_eq!(st.recurrent, rec);
    assert_eq!(
        kv_bytes(&st, n_attn, cap, tm.cfg.n_head_kv),
        kv,
        "KV rows written"
    );
    assert_eq!(st.n_past(), PREFIX.len());
    // Running it again gives the same logits, and AR decoding continues as
    // if no diffusion pass had happened.
    let again = model
        .forward_diffusion(&mut st, &block(9, 4), PREFIX.len(), LogitsFor::All)
        .unwrap()
        .to_vec();
    assert_eq!(first, again);
    let after = model
        .forward(&mut st, &[4], PREFIX.len(), LogitsFor::Last)
        .unwrap()
        .to_vec();
    let mut fresh = prefilled(&model);
    let want = model
        .forward(&mut fresh, &[4], PREFIX.len(), LogitsFor::Last)
        .unwrap()
        .to_vec();
    assert_eq!(after, want);
}

#[test]
fn zero_right_taps_give_exactly_the_ar_conv() {
    let (k, kr, ch, t) = (4usize, 3usize, 5usize, 6usize);
    let mut r = Rng::new(3);
    let w = r.vec(ch * k, 0.7);
    let window = r.vec((k - 1) * ch, 1.0);
    let mixed = r.vec(t * ch, 1.0);
    let mut two = vec![0.0; t * ch];
    conv_two_sided(
        &w,
        k,
        &vec![0.0; ch * kr],
        kr,
        &window,
        &mixed,
        ch,
        &mut two,
    );
    let mut ar = vec![0.0; t * ch];
    let mut win = window.clone();
    crate::model::deltanet::tests::conv_silu(&w, k, &mut win, &mixed, ch, &mut ar);
    assert_eq!(two, ar);
    // And non-zero right taps do change it (the test can fail).
    conv_two_sided(
        &w,
        k,
        &vec![0.5; ch * kr],
        kr,
        &window,
        &mixed,
        ch,
        &mut two,
    );
    assert_ne!(two, ar);
}

#[test]
fn right_taps_read_ahead_and_stop_at_the_last_block_index() {
    // One channel, left taps zero, right taps [1, 10, 100]: c_i = silu of
    // the next three rows, with rows past the block's end counted as 0.
    let mixed = [1.0f32, 2.0, 3.0, 4.0];
    let mut out = [0.0f32; 4];
    conv_two_sided(
        &[0.0; 4],
        4,
        &[1.0, 10.0, 100.0],
        3,
        &[9.0; 3],
        &mixed,
        1,
        &mut out,
    );
    let silu = |x: f32| x / (1.0 + (-x).exp());
    assert_eq!(out, [silu(432.0), silu(43.0), silu(4.0), silu(0.0)]);
}

#[test]
fn lambda_one_gives_exactly_the_history_read_out() {
    use crate::model::diffusion::{gdn_block, GdnBlockScratch};
    use crate::model::linear::MatScratch;
    use crate::model::weights::MixerWeights;
    let tm = TinyModel::random(tiny_config(2, 2), 44);
    let model = tm.model();
    let c = &tm.cfg;
    let MixerWeights::DeltaNet(w) = &model.weights.layers[0].mixer else {
        panic!("layer 0 is GDN")
    };
    let dw = w.diffusion.as_ref().unwrap();
    let mut state = crate::model::DeltaNetState::new(c);
    let mut r = Rng::new(8);
    state.ssm = r.vec(state.ssm.len(), 1.0);
    state.conv = r.vec(state.conv.len(), 1.0);
    let t = 4;
    let u = r.vec(t * c.n_embd, 1.0);
    let mut sc = GdnBlockScratch::new(c, t);
    sc.force_lambda = Some(1.0);
    let mut lin = MatScratch::new(t, c.ssm_conv_channels().max(c.n_embd));
    let mut out = vec![0.0; t * c.n_embd];
    let kt = kernels::KernelTable::chosen();
    gdn_block(
        Cx {
            kt,
            mode: kernels::Mode::Decode,
            cfg: c,
        },
        w,
        dw,
        &state,
        &u,
        t,
        &mut sc,
        &mut lin,
        &mut out,
    );
    let (hk, hv, d, ch) = (
        c.ssm_n_k_heads,
        c.ssm_n_v_heads,
        c.ssm_head_dim,
        c.ssm_conv_channels(),
    );
    for i in 0..t {
        for h in 0..hv {
            let q = &sc.conv[i * ch + (h % hk) * d..i * ch + (h % hk + 1) * d];
            for j in 0..d {
                // S_hᵀ q with q = q̂/√d; the stored state is S transposed.
                let row = &state.ssm[(h * d + j) * d..(h * d + j + 1) * d];
                let want = lanes_dot_reference(row, q) * (1.0 / (d as f32).sqrt());
                assert_eq!(sc.o_heads[(h * t + i) * d + j], want, "i {i} h {h} j {j}");
            }
        }
    }
}

/// The block pass's dot order written out element by element: sixteen
/// running sums by index mod 16, then a halving tree over the sums.
fn lanes_dot_reference(a: &[f32], b: &[f32]) -> f32 {
    let mut lane = [0f32; 16];
    for k in 0..a.len() {
        lane[k % 16] += a[k] * b[k];
    }
    for w in [8, 4, 2, 1] {
        for i in 0..w {
            lane[i] += lane[i + w];
        }
    }
    lane[0]
}

#[test]
fn the_block_dot_sums_sixteen_lanes_then_halves() {
    use crate::model::diffusion::dot_lanes;
    let mut r = Rng::new(5);
    // Whole chunks, a remainder, shorter than one chunk, empty.
    // (On x86-64 with AVX this checks the vector version bit for bit.)
    for n in [128usize, 37, 5, 0, 16, 17, 144, 300] {
        for _ in 0..20 {
            let (a, b) = (r.vec(n, 1.0), r.vec(n, 1.0));
            assert_eq!(
                dot_lanes(&a, &b).to_bits(),
                lanes_dot_reference(&a, &b).to_bits(),
                "n {n}"
            );
        }
    }
    // The order is not the running sum's: 1e8 + 1 - 1e8 in one lane is 0,
    // in two lanes it keeps the 1.
    let mut a = vec![0f32; 32];
    let b = vec![1f32; 32];
    (a[0], a[16], a[1]) = (1e8, -1e8, 1.0);
    assert_eq!(dot_lanes(&a, &b), 1.0);
    assert_eq!(a.iter().zip(&b).map(|(x, y)| x * y).sum::<f32>(), 0.0);
}

#[test]
fn attention_block_outputs_do_not_depend_on_query_order() {
    let tm = TinyModel::random(tiny_config(4, 2), 71);
    let model = tm.model();
    let blk = block(6, 9);
    let mut st = prefilled(&model);
    let fwd = model
        .forward_diffusion(&mut st, &blk, PREFIX.len(), LogitsFor::All)
        .unwrap()
        .to_vec();
    let knobs = DiffusionKnobs {
        reverse_queries: true,
        ..DiffusionKnobs::default()
    };
    let rev = model
        .forward_diffusion_with(&mut st, &blk, PREFIX.len(), LogitsFor::All, knobs)
        .unwrap()
        .to_vec();
    assert_eq!(fwd, rev);
}

#[test]
fn diffusion_needs_the_clover_tensors_and_checks_its_inputs() {
    let mut tm = TinyModel::random(tiny_config(2, 2), 3);
    tm.tensors
        .retain(|k, _| !k.contains("ssm_bd_") && !k.contains("weight_right"));
    let model = tm.model();
    let mut st = model.new_state(opts()).unwrap();
    let e = model
        .forward_diffusion(&mut st, &block(3, 1), 0, LogitsFor::All)
        .unwrap_err();
    assert_eq!(e, ForwardError::NoDiffusion);

    let tm = TinyModel::random(tiny_config(2, 2), 3);
    let model = tm.model();
    let mut st = model.new_state(opts()).unwrap();
    let e = model
        .forward_diffusion(&mut st, &block(3, 1), 2, LogitsFor::All)
        .unwrap_err();
    assert!(matches!(e, ForwardError::Position { .. }));
    let e = model
        .forward_diffusion(&mut st, &block(16, 1), 0, LogitsFor::All)
        .unwrap_err();
    assert!(matches!(e, ForwardError::BlockTooLong { .. }));
    let e = model
        .forward_diffusion(&mut st, &[1, 99], 0, LogitsFor::All)
        .unwrap_err();
    assert!(matches!(e, ForwardError::Token { .. }));
}

#[test]
fn a_partial_set_of_diffusion_tensors_is_a_load_error() {
    let mut tm = TinyModel::random(tiny_config(2, 2), 3);
    tm.tensors.remove("blk.0.ssm_bd_history.bias");
    let e = Model::bind(tm.cfg.clone(), kernels::KernelTable::chosen(), &|n| {
        tm.lookup(n)
    })
    .unwrap_err();
    assert_eq!(
        e,
        crate::model::WeightError::Missing("blk.0.ssm_bd_history.bias".into())
    );
}

// The module's own unit tests.
use super::*;

/// The two-sided conv gives the same bits from transposed taps as from the
/// file's layout (rows near the block's end included).
#[test]
fn the_two_sided_conv_is_the_same_from_either_tap_layout() {
    let (ch, k, kr, t) = (40, 4, 3, 6);
    let mut r = crate::model::tiny::Rng::new(41);
    let mut vec = |n: usize| r.vec(n, 1.0);
    let (w, wr, window, mixed) = (vec(ch * k), vec(ch * kr), vec((k - 1) * ch), vec(t * ch));
    let (wt, wrt) = (by_tap(&w, k, ch), by_tap(&wr, kr, ch));
    let run = |w: Taps, wr: Taps| {
        let c = ConvTaps {
            w,
            k,
            wr,
            kr,
            window: &window,
            mixed: &mixed,
            ch,
        };
        let mut out = vec![0f32; t * ch];
        two_sided_rows(&c, 0, &mut out);
        out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    };
    assert_eq!(
        run(Taps::ByChannel(&w), Taps::ByChannel(&wr)),
        run(Taps::ByTap(&wt), Taps::ByTap(&wrt))
    );
}
