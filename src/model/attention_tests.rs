//! Gated attention against a direct f64 transcription of docs/DESIGN.md §2.2, plus
//! crafted checks of the causal mask, the GQA mapping and the q/gate split.

use crate::model::attention::{self, AttentionScratch};
use crate::model::forward::Model;
use crate::model::kv::KvCache;
use crate::model::linear::MatScratch;
use crate::model::tiny::*;
use crate::model::weights::{AttentionWeights, MixerWeights};
use kernels::GgmlType;

fn attn_weights<'a>(m: &'a Model<'a>, il: usize) -> &'a AttentionWeights<'a> {
    match &m.weights.layers[il].mixer {
        MixerWeights::Attention(w) => w,
        _ => panic!("layer {il} is not attention"),
    }
}

/// Runs layer `il`'s attention over `u` (`[t][n_embd]`) in batches of `step`.
fn run(tm: &TinyModel, il: usize, u: &[f32], step: usize, ty: GgmlType) -> Vec<f32> {
    run_in(tm, il, u, step, ty, kernels::Mode::Decode)
}

/// [`run`] with the batches in `mode`.
fn run_in(
    tm: &TinyModel,
    il: usize,
    u: &[f32],
    step: usize,
    ty: GgmlType,
    mode: kernels::Mode,
) -> Vec<f32> {
    run_with(tm, il, u, step, (ty, ty), mode, false)
}

/// [`run_in`] with K and V types of their own, and llama.cpp's flash
/// attention arithmetic when `flash`.
fn run_with(
    tm: &TinyModel,
    il: usize,
    u: &[f32],
    step: usize,
    (ty_k, ty_v): (GgmlType, GgmlType),
    mode: kernels::Mode,
    flash: bool,
) -> Vec<f32> {
    let model = tm.model();
    let cfg = &model.config;
    let w = attn_weights(&model, il);
    let kt = kernels::KernelTable::chosen();
    let cx = Cx { kt, mode, cfg };
    let e = cfg.n_embd;
    let t = u.len() / e;
    let n_ctx = t.max(16);
    let mut kv = KvCache::new(1, n_ctx, cfg.n_head_kv, cfg.head_dim, ty_k, ty_v).unwrap();
    kv.flash = flash;
    let mut sc = AttentionScratch::new(cfg, step, n_ctx);
    let mut lin = MatScratch::new(step, 64);
    let mut out = vec![0.0f32; t * e];
    let mut p = 0;
    while p < t {
        let n = step.min(t - p);
        attention::forward(
            cx,
            w,
            attention::KvRows::Append(&mut kv),
            0,
            p,
            &u[p * e..(p + n) * e],
            n,
            &mut sc,
            &mut lin,
            &mut out[p * e..],
        );
        p += n;
        kv.set_len(p);
    }
    out
}

pub(crate) fn reference(tm: &TinyModel, il: usize, u: &[f32]) -> Vec<f64> {
    let c = &tm.cfg;
    let v = |s: &str| tm.values(&format!("blk.{il}.{s}"));
    let (wq, wk, wv, wo) = (
        v("attn_q.weight"),
        v("attn_k.weight"),
        v("attn_v.weight"),
        v("attn_output.weight"),
    );
    let (qn, kn) = (v("attn_q_norm.weight"), v("attn_k_norm.weight"));
    let (e, d, nh, nkv) = (c.n_embd, c.head_dim, c.n_head, c.n_head_kv);
    let eps = c.rms_eps as f64;
    let t_n = u.len() / e;
    let mv = |w: &[f32], x: &[f32], n_out: usize| -> Vec<f64> {
        (0..n_out)
            .map(|o| {
                (0..x.len())
                    .map(|i| w[o * x.len() + i] as f64 * x[i] as f64)
                    .sum()
            })
            .collect()
    };
    let norm = |x: &[f64], w: &[f32]| -> Vec<f64> {
        let ms = x.iter().map(|a| a * a).sum::<f64>() / x.len() as f64;
        x.iter()
            .zip(w)
            .map(|(a, b)| a / (ms + eps).sqrt() * *b as f64)
            .collect()
    };
    let rope = |x: &mut [f64], p: usize| {
        let half = c.n_rot / 2;
        for i in 0..half {
            let th = p as f64 * (c.rope_base as f64).powf(-2.0 * i as f64 / c.n_rot as f64);
            let (a, b) = (x[i], x[i + half]);
            x[i] = a * th.cos() - b * th.sin();
            x[i + half] = a * th.sin() + b * th.cos();
        }
    };
    let mut ks = vec![];
    let mut vs = vec![];
    let mut out = vec![];
    for t in 0..t_n {
        let x = &u[t * e..(t + 1) * e];
        let qg = mv(&wq, x, nh * 2 * d);
        let kr = mv(&wk, x, nkv * d);
        let vr = mv(&wv, x, nkv * d);
        let mut kh = vec![];
        for g in 0..nkv {
            let mut k = norm(&kr[g * d..(g + 1) * d], &kn);
            rope(&mut k, t);
            kh.push(k);
        }
        ks.push(kh);
        vs.push(
            (0..nkv)
                .map(|g| vr[g * d..(g + 1) * d].to_vec())
                .collect::<Vec<_>>(),
        );
        let mut cat = vec![0.0f64; nh * d];
        for h in 0..nh {
            let mut q = norm(&qg[h * 2 * d..h * 2 * d + d], &qn);
            rope(&mut q, t);
            let gate = &qg[h * 2 * d + d..(h + 1) * 2 * d];
            let g = h / (nh / nkv);
            let sc: Vec<f64> = (0..=t)
                .map(|s| (0..d).map(|i| q[i] * ks[s][g][i]).sum::<f64>() / (d as f64).sqrt())
                .collect();
            let mx = sc.iter().cloned().fold(f64::MIN, f64::max);
            let ex: Vec<f64> = sc.iter().map(|s| (s - mx).exp()).collect();
            let z: f64 = ex.iter().sum();
            for j in 0..d {
                let a: f64 = (0..=t).map(|s| ex[s] / z * vs[s][g][j]).sum();
                cat[h * d + j] = a / (1.0 + (-gate[j]).exp());
            }
        }
        out.extend((0..e).map(|o| {
            (0..nh * d)
                .map(|i| wo[o * nh * d + i] as f64 * cat[i])
                .sum::<f64>()
        }));
    }
    out
}

#[test]
fn attention_matches_the_design_transcription_token_by_token_and_batched() {
    let tm = TinyModel::random(tiny_config(2, 2), 21);
    let mut r = Rng::new(5);
    let u = r.vec(6 * tm.cfg.n_embd, 1.0);
    let want = reference(&tm, 1, &u);
    for step in [1, 4, 6] {
        let got = run(&tm, 1, &u, step, GgmlType::F32);
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "step {step} [{i}]: {g} vs {w}"
            );
        }
    }
}

/// Prompt batches of 8 or more rows take their own blocked attention: it
/// must match the transcription as closely as decoding does (f32 cache), in
/// batches that start on an empty cache and after cached positions, with
/// row counts that are not whole query blocks; and with an f16 cache stay
/// as close to decoding's f16 result as decoding is to f32.
#[test]
fn prompt_batches_attend_as_the_transcription_says() {
    let tm = TinyModel::random(tiny_config(2, 2), 23);
    let mut r = Rng::new(7);
    let u = r.vec(29 * tm.cfg.n_embd, 1.0);
    let want = reference(&tm, 1, &u);
    for step in [29, 9, 13] {
        let got = run_in(&tm, 1, &u, step, GgmlType::F32, kernels::Mode::Prompt);
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
                "step {step} [{i}]: {g} vs {w}"
            );
        }
        let dec = run(&tm, 1, &u, step, GgmlType::F16);
        let pro = run_in(&tm, 1, &u, step, GgmlType::F16, kernels::Mode::Prompt);
        let f32_dec = run(&tm, 1, &u, step, GgmlType::F32);
        let (apart, rounding) = (max_abs_diff(&dec, &pro), max_abs_diff(&dec, &f32_dec));
        assert!(
            apart <= rounding,
            "step {step}: f16 cache, prompt vs decoding {apart} > f16 rounding {rounding}"
        );
    }
}

/// llama.cpp's flash-attention arithmetic (both of ggml's forms: a batch of
/// 64 or more rows with an f16 cache goes by tiles, anything else row by
/// row, its accumulator in f16 for an f16 V) computes the same attention:
/// as close to the transcription as decoding with the same cache, give or
/// take the f16 rounding decoding's own f16 cache shows against f32 (the
/// row-by-row form rounds its accumulator to f16 at every position). Its
/// digits are llama.cpp's (tests/real_files.rs).
#[test]
fn flash_attention_computes_the_transcriptions_attention() {
    let tm = TinyModel::random(tiny_config(2, 2), 24);
    let mut r = Rng::new(8);
    let u = r.vec(70 * tm.cfg.n_embd, 1.0);
    let want = reference(&tm, 1, &u);
    let f32_dec = run(&tm, 1, &u, 1, GgmlType::F32);
    let f16_rounding = max_abs_diff(&run(&tm, 1, &u, 1, GgmlType::F16), &f32_dec);
    let (f16, bf16) = (GgmlType::F16, GgmlType::BF16);
    for (step, kv) in [
        (70, (f16, f16)),
        (13, (f16, f16)),
        (70, (bf16, bf16)),
        (70, (bf16, f16)),
    ] {
        let dec = run_with(&tm, 1, &u, 1, kv, kernels::Mode::Decode, false);
        let got = run_with(&tm, 1, &u, step, kv, kernels::Mode::Ggml, true);
        let err = |x: &[f32]| {
            x.iter()
                .zip(&want)
                .map(|(&g, &w)| (g as f64 - w).abs())
                .fold(0.0, f64::max)
        };
        let (flash_err, dec_err) = (err(&got), err(&dec));
        assert!(
            flash_err <= dec_err + f16_rounding as f64,
            "step {step} {kv:?}: flash {flash_err}, decoding {dec_err}, f16 rounding {f16_rounding}"
        );
    }
}

#[test]
fn later_tokens_do_not_change_earlier_outputs() {
    let tm = TinyModel::random(tiny_config(2, 2), 22);
    let e = tm.cfg.n_embd;
    let mut r = Rng::new(6);
    let u = r.vec(4 * e, 1.0);
    let mut u2 = u.clone();
    for x in &mut u2[2 * e..] {
        *x = -*x * 3.0;
    }
    let a = run(&tm, 1, &u, 4, GgmlType::F32);
    let b = run(&tm, 1, &u2, 4, GgmlType::F32);
    assert_eq!(&a[..2 * e], &b[..2 * e]);
    assert_ne!(&a[2 * e..], &b[2 * e..]);
}

/// attn_output that copies heads 2 and 3 (16 dims each) to the 32 outputs.
fn select_heads_2_and_3(tm: &mut TinyModel) {
    let c = &tm.cfg;
    let (e, d, nh) = (c.n_embd, c.head_dim, c.n_head);
    let mut wo = vec![0.0f32; e * nh * d];
    for o in 0..e {
        wo[o * nh * d + 2 * d + o] = 1.0;
    }
    tm.set(
        "blk.1.attn_output.weight",
        Tensor::f32(&[(nh * d) as u64, e as u64], &wo),
    );
}

fn zero_v_head(tm: &mut TinyModel, g: usize) {
    let c = &tm.cfg;
    let (e, d, nkv) = (c.n_embd, c.head_dim, c.n_head_kv);
    let mut wv = tm.values("blk.1.attn_v.weight");
    wv[g * d * e..(g + 1) * d * e].fill(0.0);
    tm.set(
        "blk.1.attn_v.weight",
        Tensor::f32(&[e as u64, (nkv * d) as u64], &wv),
    );
}

#[test]
fn query_heads_read_kv_head_h_over_group_size() {
    // 4 query heads, 2 KV heads: heads 2 and 3 read KV head 1.
    let mut r = Rng::new(7);
    let u = r.vec(3 * 32, 1.0);
    let mut tm = TinyModel::random(tiny_config(2, 2), 23);
    select_heads_2_and_3(&mut tm);
    zero_v_head(&mut tm, 1);
    let out = run(&tm, 1, &u, 3, GgmlType::F32);
    assert!(
        out.iter().all(|x| *x == 0.0),
        "heads 2, 3 must see the zeroed KV head 1"
    );
    let mut tm = TinyModel::random(tiny_config(2, 2), 23);
    select_heads_2_and_3(&mut tm);
    zero_v_head(&mut tm, 0);
    let out = run(&tm, 1, &u, 3, GgmlType::F32);
    assert!(
        out.iter().all(|x| *x != 0.0),
        "heads 2, 3 must not read KV head 0"
    );
}

#[test]
fn the_gate_half_of_each_query_head_multiplies_the_output() {
    // Zeroing the gate rows (second half of each head's 2d rows) of attn_q
    // gives σ(0) = 1/2 gates: the output is exactly the ungated attention
    // halved, which the query half cannot imitate.
    let mut r = Rng::new(8);
    let u = r.vec(2 * 32, 1.0);
    let mut tm = TinyModel::random(tiny_config(2, 2), 24);
    let c = tm.cfg.clone();
    let (e, d, nh) = (c.n_embd, c.head_dim, c.n_head);
    let mut wq = tm.values("blk.1.attn_q.weight");
    for h in 0..nh {
        wq[(h * 2 * d + d) * e..(h + 1) * 2 * d * e].fill(0.0);
    }
    tm.set(
        "blk.1.attn_q.weight",
        Tensor::f32(&[e as u64, (nh * 2 * d) as u64], &wq),
    );
    let got = run(&tm, 1, &u, 2, GgmlType::F32);
    let want = reference(&tm, 1, &u);
    for (g, w) in got.iter().zip(&want) {
        assert!((*g as f64 - w).abs() < 1e-5 * (1.0 + w.abs()));
    }
}

#[test]
fn f16_and_bf16_caches_stay_close_to_f32() {
    let tm = TinyModel::random(tiny_config(2, 2), 25);
    let mut r = Rng::new(9);
    let u = r.vec(5 * 32, 1.0);
    let base = run(&tm, 1, &u, 5, GgmlType::F32);
    for (ty, tol) in [(GgmlType::F16, 1e-2), (GgmlType::BF16, 5e-2)] {
        let got = run(&tm, 1, &u, 5, ty);
        let d = max_abs_diff(&base, &got);
        assert!(d < tol, "{ty}: {d}");
        assert!(d > 0.0, "{ty} cache must actually round");
    }
}

#[test]
fn an_f16_v_cache_sees_softmax_weights_rounded_to_f16() {
    // k = 0 (zero attn_k) makes the weights uniform: 1/3 at position 2. With a
    // one-hot input, v is a column of attn_v, chosen exact in f16, so the only
    // difference an f16 cache makes is p = f16(1/3) instead of 1/3.
    let mut tm = TinyModel::random(tiny_config(2, 2), 27);
    let c = tm.cfg.clone();
    let (e, d, nkv) = (c.n_embd, c.head_dim, c.n_head_kv);
    tm.set(
        "blk.1.attn_k.weight",
        Tensor::f32(&[e as u64, (nkv * d) as u64], &vec![0.0; e * nkv * d]),
    );
    let mut wv = vec![0.0f32; e * nkv * d];
    for o in 0..nkv * d {
        wv[o * e] = (o as f32 - 13.0) / 8.0;
    }
    tm.set(
        "blk.1.attn_v.weight",
        Tensor::f32(&[e as u64, (nkv * d) as u64], &wv),
    );
    let mut u = vec![0.0f32; 3 * e];
    for t in 0..3 {
        u[t * e] = 1.0;
    }
    let f32_out = run(&tm, 1, &u, 3, GgmlType::F32);
    let f16_out = run(&tm, 1, &u, 3, GgmlType::F16);
    let ratio = 3.0 * half::f16::from_f32(1.0 / 3.0).to_f32();
    assert!((ratio - 1.0).abs() > 1e-4);
    let mut checked = 0;
    for (a, b) in f32_out[2 * e..].iter().zip(&f16_out[2 * e..]) {
        if a.abs() > 0.1 {
            assert!((b / a - ratio).abs() < 1e-5, "{b} / {a} vs {ratio}");
            checked += 1;
        }
    }
    assert!(checked > 8);
}

// The module's own unit tests.
use super::*;
use crate::model::ops::reduce_add_16;
use crate::sample::splitmix64;

/// The plain reference: position by position, each V row converted to
/// f32 and fused into lane `s % span`, then the same reduction.
fn rowwise(p: &[f32], rows: &[Vec<f32>], d: usize, batch: bool) -> Vec<f32> {
    let span = if batch { GGML_LANES } else { V_LANES };
    let mut acc = vec![0f32; d * V_LANES];
    for (s, &ps) in p.iter().enumerate() {
        let lane = s % span;
        for j in 0..d {
            acc[lane * d + j] = rows[s][j].mul_add(ps, acc[lane * d + j]);
        }
    }
    let a = |acc: &[f32], k: usize, j: usize| acc[k * d + j];
    let mut o = vec![0f32; d];
    for (j, oj) in o.iter_mut().enumerate() {
        let lane = |l: usize| {
            if batch {
                a(&acc, l, j)
            } else {
                (a(&acc, l, j) + a(&acc, 32 + l, j)) + (a(&acc, 16 + l, j) + a(&acc, 48 + l, j))
            }
        };
        let t: [f32; GGML_LANES] = std::array::from_fn(lane);
        *oj = reduce_add_16(&t);
    }
    o
}

/// Deterministic values in [−1, 1) (splitmix64).
fn values(seed: u64, len: usize) -> Vec<f32> {
    let mut s = seed;
    (0..len)
        .map(|_| (splitmix64(&mut s) >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        .collect()
}

#[test]
fn v_weighted_sum_lane_by_lane_over_a_task_of_heads_gives_the_position_by_position_bits() {
    for d in [8, 17, 64, 256] {
        for n in [1, 15, 16, 17, 63, 64, 65, 130, 300] {
            let f16_rows: Vec<Vec<u16>> = (0..n)
                .map(|s| {
                    values(1000 + s as u64, d)
                        .iter()
                        .map(|&x| half::f16::from_f32(x * 3.0).to_bits())
                        .collect()
                })
                .collect();
            let rows: Vec<Vec<f32>> = f16_rows
                .iter()
                .map(|r| {
                    r.iter()
                        .map(|&b| half::f16::from_bits(b).to_f32())
                        .collect()
                })
                .collect();
            for heads in [1, 3] {
                // Each head's weights, `stride` apart with garbage between.
                let stride = n + 5;
                let p = values(n as u64, heads * stride);
                for batch in [false, true] {
                    let want: Vec<f32> = (0..heads)
                        .flat_map(|h| rowwise(&p[h * stride..h * stride + n], &rows, d, batch))
                        .collect();
                    let mut acc = vec![f32::NAN; heads * d * V_LANES];
                    // f32 rows, f16 rows, and f16 rows up to position 40
                    // then f32 (a diffusion block's rows after the cache).
                    for source in 0..3 {
                        let mut o = vec![f32::NAN; heads * d];
                        v_weighted_sum((&p, stride, n), (&mut o, d), &mut acc, batch, |s| {
                            match source {
                                0 => VRow::F32(&rows[s]),
                                1 => VRow::F16(&f16_rows[s]),
                                _ if s >= 40 => VRow::F32(&rows[s]),
                                _ => VRow::F16(&f16_rows[s]),
                            }
                        });
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(
                            bits(&o),
                            bits(&want),
                            "d {d}, {n} positions, {heads} heads, batch {batch}, source {source}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn attention_tasks_stay_within_one_kv_group_and_give_every_thread_one() {
    // (group, n_head_kv, threads) → heads per task.
    for (group, nkv, threads, want) in [
        (8, 2, 2, 8),
        (8, 2, 1, 8),
        (8, 2, 4, 4),
        (8, 1, 2, 4),
        (8, 1, 3, 2),
        (6, 1, 4, 1),
        (1, 16, 2, 1),
        (2, 2, 8, 1),
    ] {
        let hpt = heads_per_task(group, nkv, threads);
        assert_eq!(
            hpt, want,
            "group {group}, {nkv} KV heads, {threads} threads"
        );
        assert!(group.is_multiple_of(hpt));
    }
}
