//! The whole forward pass: against the composed f64 references, batch ==
//! token by token, KV truncation, logits selection, errors and counters.

use crate::model::config::LayerKind;
use crate::model::state::StateOptions;
use crate::model::tiny::*;
use crate::model::{ForwardError, LogitsFor};

/// docs/DESIGN.md §2 composed from the per-block references of the sibling modules.
fn reference_logits(tm: &TinyModel, tokens: &[u32]) -> Vec<f64> {
    let c = &tm.cfg;
    let e = c.n_embd;
    let eps = c.rms_eps as f64;
    let embd = tm.values("token_embd.weight");
    let norm = |x: &[f64], w: &[f32]| -> Vec<f32> {
        let ms = x.iter().map(|a| a * a).sum::<f64>() / x.len() as f64;
        x.iter()
            .zip(w)
            .map(|(a, b)| (a / (ms + eps).sqrt() * *b as f64) as f32)
            .collect()
    };
    let mut x: Vec<f64> = tokens
        .iter()
        .flat_map(|&id| {
            embd[id as usize * e..(id as usize + 1) * e]
                .iter()
                .map(|v| *v as f64)
        })
        .collect();
    for il in 0..c.n_layer {
        let v = |s: &str| tm.values(&format!("blk.{il}.{s}"));
        let xn: Vec<f32> = x
            .chunks(e)
            .flat_map(|r| norm(r, &v("attn_norm.weight")))
            .collect();
        let y: Vec<f64> = match c.layer_kinds[il] {
            LayerKind::DeltaNet => {
                let mut r = crate::model::deltanet::tests::Reference::new(tm, il);
                xn.chunks(e).flat_map(|u| r.step(u)).collect()
            }
            LayerKind::Attention => crate::model::attention::tests::reference(tm, il, &xn),
        };
        for (a, b) in x.iter_mut().zip(&y) {
            *a += b;
        }
        let xn: Vec<f32> = x
            .chunks(e)
            .flat_map(|r| norm(r, &v("post_attention_norm.weight")))
            .collect();
        let y = crate::model::moe::tests::reference(tm, il, &xn);
        for (a, b) in x.iter_mut().zip(&y) {
            *a += b;
        }
    }
    let out = tm.values("output.weight");
    let on = tm.values("output_norm.weight");
    x.chunks(e)
        .flat_map(|r| {
            let h = norm(r, &on);
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

const TOKENS: [u32; 7] = [3, 17, 42, 0, 49, 17, 8];

#[test]
fn hybrid_forward_matches_the_composed_design_reference() {
    let tm = TinyModel::random(tiny_config(4, 2), 41);
    let model = tm.model();
    let mut st = model.new_state(StateOptions::new(16)).unwrap();
    let got = model
        .forward(&mut st, &TOKENS, 0, LogitsFor::All)
        .unwrap()
        .to_vec();
    let want = reference_logits(&tm, &TOKENS);
    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= 1e-4 * (1.0 + w.abs()),
            "[{i}] {g} vs {w}"
        );
    }
}

#[test]
fn batch_forward_equals_single_token_forwards() {
    let tm = TinyModel::random(tiny_config(4, 2), 42);
    let model = tm.model();
    let v = model.n_vocab();
    let mut singles = vec![];
    let mut st = model.new_state(StateOptions::new(16)).unwrap();
    for (p, &tok) in TOKENS.iter().enumerate() {
        singles.extend_from_slice(model.forward(&mut st, &[tok], p, LogitsFor::Last).unwrap());
    }
    for max_batch in [7, 3] {
        let mut opts = StateOptions::new(16);
        opts.max_batch = max_batch;
        let mut st = model.new_state(opts).unwrap();
        let all = model.forward(&mut st, &TOKENS, 0, LogitsFor::All).unwrap();
        assert_eq!(all.len(), TOKENS.len() * v);
        let d = max_abs_diff(all, &singles);
        assert!(d < 1e-5, "max_batch {max_batch}: {d}");
        // Continuing after the batch equals continuing after the singles.
        assert_eq!(st.n_past(), TOKENS.len());
    }
}

#[test]
fn truncating_the_kv_cache_and_re_running_reproduces_the_logits() {
    // Every layer full attention (interval 1): the whole state is the KV cache.
    let tm = TinyModel::random(tiny_config(2, 1), 43);
    let model = tm.model();
    let mut st = model.new_state(StateOptions::new(16)).unwrap();
    let first = model
        .forward(&mut st, &TOKENS, 0, LogitsFor::All)
        .unwrap()
        .to_vec();
    st.kv.truncate(3);
    assert_eq!(st.n_past(), 3);
    let again = model
        .forward(&mut st, &TOKENS[3..], 3, LogitsFor::All)
        .unwrap();
    let v = model.n_vocab();
    assert!(max_abs_diff(again, &first[3 * v..]) < 1e-6);
    // A different continuation after truncation does not see the old one.
    st.kv.truncate(3);
    let other = model
        .forward(&mut st, &[5, 5], 3, LogitsFor::Last)
        .unwrap()
        .to_vec();
    let mut fresh = model.new_state(StateOptions::new(16)).unwrap();
    let want = model
        .forward(&mut fresh, &[3, 17, 42, 5, 5], 0, LogitsFor::Last)
        .unwrap();
    assert!(max_abs_diff(&other, want) < 1e-6);
}

#[test]
fn logits_indices_come_back_in_the_requested_order() {
    let tm = TinyModel::random(tiny_config(4, 2), 44);
    let model = tm.model();
    let v = model.n_vocab();
    let mut opts = StateOptions::new(16);
    opts.max_batch = 3;
    let mut st = model.new_state(opts).unwrap();
    let all = model
        .forward(&mut st, &TOKENS, 0, LogitsFor::All)
        .unwrap()
        .to_vec();
    st.reset();
    let idx = [6usize, 0, 4, 4];
    let sel = model
        .forward(&mut st, &TOKENS, 0, LogitsFor::Indices(&idx))
        .unwrap();
    assert_eq!(sel.len(), 4 * v);
    for (r, &i) in idx.iter().enumerate() {
        assert_eq!(
            &sel[r * v..(r + 1) * v],
            &all[i * v..(i + 1) * v],
            "row {r}"
        );
    }
}

#[test]
fn reset_returns_to_an_empty_sequence() {
    let tm = TinyModel::random(tiny_config(4, 2), 45);
    let model = tm.model();
    let mut st = model.new_state(StateOptions::new(16)).unwrap();
    let a = model
        .forward(&mut st, &TOKENS, 0, LogitsFor::Last)
        .unwrap()
        .to_vec();
    st.reset();
    assert_eq!(st.n_past(), 0);
    let b = model.forward(&mut st, &TOKENS, 0, LogitsFor::Last).unwrap();
    assert_eq!(a, b);
}

#[test]
fn bad_calls_are_errors_not_panics() {
    let tm = TinyModel::random(tiny_config(4, 2), 46);
    let model = tm.model();
    let mut st = model.new_state(StateOptions::new(4)).unwrap();
    assert_eq!(
        model.forward(&mut st, &[], 0, LogitsFor::Last).unwrap_err(),
        ForwardError::Empty
    );
    assert_eq!(
        model
            .forward(&mut st, &[1], 2, LogitsFor::Last)
            .unwrap_err(),
        ForwardError::Position {
            expected: 0,
            got: 2
        }
    );
    assert_eq!(
        model
            .forward(&mut st, &[1, 2, 3, 4, 5], 0, LogitsFor::Last)
            .unwrap_err(),
        ForwardError::ContextFull { need: 5, n_ctx: 4 }
    );
    assert_eq!(
        model
            .forward(&mut st, &[50], 0, LogitsFor::Last)
            .unwrap_err(),
        ForwardError::Token {
            id: 50,
            n_vocab: 50
        }
    );
    assert_eq!(
        model
            .forward(&mut st, &[1, 2], 0, LogitsFor::Indices(&[2]))
            .unwrap_err(),
        ForwardError::Index {
            index: 2,
            n_tokens: 2
        }
    );
    // Nothing above advanced the state.
    assert_eq!(st.n_past(), 0);
}

#[test]
fn stats_count_every_routed_token_and_time_only_when_asked() {
    let tm = TinyModel::random(tiny_config(4, 2), 47);
    let model = tm.model();
    let mut st = model.new_state(StateOptions::new(16)).unwrap();
    model
        .forward(&mut st, &TOKENS[..4], 0, LogitsFor::Last)
        .unwrap();
    assert!(st.stats.mixer_ns.iter().all(|&n| n == 0));
    st.stats.timing = true;
    model
        .forward(&mut st, &TOKENS[4..], 4, LogitsFor::Last)
        .unwrap();
    assert!(st.stats.mixer_ns.iter().all(|&n| n > 0));
    assert!(st.stats.moe_ns.iter().all(|&n| n > 0));
    assert_eq!(st.stats.tokens, 7);
    let k = tm.cfg.n_expert_used as u64;
    for il in 0..4 {
        assert_eq!(st.stats.layer_counts(il).iter().sum::<u64>(), 7 * k);
        let last = &st.stats.last_experts[il * k as usize..(il + 1) * k as usize];
        assert!(last.iter().all(|&x| (x as usize) < tm.cfg.n_expert));
        assert_ne!(last[0], last[1]);
    }
}

#[test]
fn f16_weights_run_and_stay_close_to_f32() {
    let tm = TinyModel::random(tiny_config(4, 2), 48);
    let model = tm.model();
    let mut st = model.new_state(StateOptions::new(16)).unwrap();
    let base = model
        .forward(&mut st, &TOKENS, 0, LogitsFor::All)
        .unwrap()
        .to_vec();
    let mut th = TinyModel::random(tiny_config(4, 2), 48);
    for name in [
        "blk.0.attn_qkv.weight",
        "blk.1.attn_q.weight",
        "blk.2.ffn_down_exps.weight",
        "output.weight",
    ] {
        let t = &th.tensors[name];
        let f = Tensor::f16(&t.dims.clone(), &t.values());
        th.set(name, f);
    }
    let model = th.model();
    let mut st = model.new_state(StateOptions::new(16)).unwrap();
    let got = model.forward(&mut st, &TOKENS, 0, LogitsFor::All).unwrap();
    let d = max_abs_diff(&base, got);
    assert!(d > 0.0 && d < 5e-2, "{d}");
}
