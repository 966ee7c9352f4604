//! Forward-pass benches on in-memory random models with the 35B-A3B layer
//! dimensions (2 layers: GDN + attention at interval 2; 8 of 16 experts per
//! token; F16 matrices). Throughput is the weight bytes one decoded token
//! streams: both mixers, the router, 8 experts and the shared expert.

use clover::model::tiny::{a3b_layer_config, TinyModel};
use clover::model::{LogitsFor, StateOptions};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::time::{Duration, Instant};

fn decode(c: &mut Criterion) {
    let mut cfg = a3b_layer_config(2, 16);
    cfg.full_attention_interval = 2;
    cfg.layer_kinds = vec![
        clover::model::LayerKind::DeltaNet,
        clover::model::LayerKind::Attention,
    ];
    let mut tm = TinyModel::random(cfg, 1);
    tm.to_f16(4096);
    let model = tm.model();
    let per_expert = 3 * 2048 * 512 * 2;
    let streamed = tm.bytes() - 2 * 8 * per_expert;
    let mut g = c.benchmark_group("forward");
    g.throughput(Throughput::Bytes(streamed as u64));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(5));
    g.bench_function("a3b_2layers_f16_decode", |b| {
        b.iter_custom(|iters| {
            let mut st = model.new_state(StateOptions::new(4096)).unwrap();
            model
                .forward(&mut st, &[1, 2, 3, 4], 0, LogitsFor::Last)
                .unwrap();
            let t0 = Instant::now();
            for i in 0..iters {
                if st.n_past() + 1 >= 4096 {
                    st.reset();
                }
                let p = st.n_past();
                model
                    .forward(&mut st, &[(i % 50) as u32], p, LogitsFor::Last)
                    .unwrap();
            }
            t0.elapsed()
        })
    });
    g.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
