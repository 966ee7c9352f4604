//! docs/DESIGN.md §5's cost claim, measured: committing a verify pass (the replay
//! rollback, 16 kept positions: the most replay a commit can do) against the
//! 16-token verify pass itself.
//!
//! What is measured is work, not waiting: both run on one thread (a 1-thread
//! rayon pool, so every parallel section runs inline) and are timed with the
//! thread's CPU clock, which does not advance while the thread is
//! descheduled. Wall-clock timing on a loaded 2-core machine is dominated by
//! preemption: a 1.5 ms replay that loses one scheduler slice reads 15–30 ms,
//! and a 24 ms (CPU) verify pass reads 75–320 ms (both measured), which is
//! what made the earlier mean-of-wall-time figures swing between 3 and 6 %
//! and understate the share. Per round the ratio replay / verify is taken;
//! the median over the timed rounds (after one warm-up round) is asserted
//! and the spread (min, max) printed. The replay splits across threads as
//! one dispatch of independent (layer, value head) jobs.
//!
//! Measured (CPU time, median [min, max]; test profile):
//! - real 35B-A3B layer dimensions, 3 GDN + 1 attention layer (the real
//!   3:1 mix; only GDN layers replay), 8 experts: verify 610 ms, replay
//!   6.4 ms: 1.08 % [1.03, 1.19]. Asserted: < 5 % (the target).
//! - synth `small` file: its matmuls are tiny (d_model 256) next to the
//!   recurrence (8 × 64² state per GDN layer), and the replay is 2/3 of the
//!   recurrence's own per-position work (decay, predict, update; no
//!   read-out), so the share is structurally higher there. With its Q4_K
//!   matrices repacked (`kernels::repack`, AVX-512 VNNI) verify 14.7 ms,
//!   replay 0.50 ms: 3.43 % [3.20, 3.73]; in the file's layout verify
//!   23.7 ms: 2.14 %. Asserted: < 8 %. (Before the replay kernel kept the
//!   state rows in registers across positions, `KernelTable::delta_replay`,
//!   the replay took 1.87 ms: 7.9 % of the file-layout verify and 12.5 % of
//!   the repacked one.)

use std::time::Instant;

use clover::gguf::GgufFile;
use clover::model::tiny::{a3b_layer_config, TinyModel};
use clover::model::{LogitsFor, Model, StateOptions};
use clover::synth::{self, Arch, Preset, Recipe, SynthOptions};

/// This thread's CPU time in nanoseconds (Linux); elsewhere wall time.
#[cfg(target_os = "linux")]
fn cpu_ns() -> u128 {
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    unsafe extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec (two i64 fields on the 64-bit
    // Linux targets this crate builds for) and the clock id is a constant
    // every Linux kernel since 2.6 accepts.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    ts.sec as u128 * 1_000_000_000 + ts.nsec as u128
}

#[cfg(not(target_os = "linux"))]
fn cpu_ns() -> u128 {
    use std::sync::OnceLock;
    static T0: OnceLock<Instant> = OnceLock::new();
    T0.get_or_init(Instant::now).elapsed().as_nanos()
}

/// One round's verify and rollback: CPU ns and wall ns.
struct Round {
    verify_cpu: f64,
    rollback_cpu: f64,
    verify_wall: f64,
    rollback_wall: f64,
}

const WARM_UP: usize = 1;

fn rounds(model: &Model, vocab: u32, timed: usize) -> Vec<Round> {
    let mut o = StateOptions::new(512);
    o.max_batch = 16;
    let mut st = model.new_state(o).unwrap();
    let prompt: Vec<u32> = (0..8).map(|i| (i * 37 + 5) % vocab).collect();
    model.forward(&mut st, &prompt, 0, LogitsFor::Last).unwrap();
    let mut out = vec![];
    for round in 0..(WARM_UP + timed) as u32 {
        let n = st.n_past();
        let toks: Vec<u32> = (0..16).map(|i| (round * 101 + i * 13) % vocab).collect();
        let (w0, c0) = (Instant::now(), cpu_ns());
        model
            .forward_verify(&mut st, &toks, n, LogitsFor::All)
            .unwrap();
        let (w1, c1) = (Instant::now(), cpu_ns());
        model.commit_verify(&mut st, 16).unwrap();
        let (w2, c2) = (Instant::now(), cpu_ns());
        if round as usize >= WARM_UP {
            out.push(Round {
                verify_cpu: (c1 - c0) as f64,
                rollback_cpu: (c2 - c1) as f64,
                verify_wall: (w1 - w0).as_nanos() as f64,
                rollback_wall: (w2 - w1).as_nanos() as f64,
            });
        }
    }
    out
}

fn median(mut x: Vec<f64>) -> f64 {
    x.sort_by(f64::total_cmp);
    let n = x.len();
    if n % 2 == 1 {
        x[n / 2]
    } else {
        0.5 * (x[n / 2 - 1] + x[n / 2])
    }
}

/// Median (and min, max) over the timed rounds of rollback / verify in CPU
/// time, measured on one thread; prints the figures.
fn rollback_share(name: &str, model: &Model, vocab: u32, timed: usize) -> f64 {
    let rs = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap()
        .install(|| rounds(model, vocab, timed));
    let ratios: Vec<f64> = rs.iter().map(|r| r.rollback_cpu / r.verify_cpu).collect();
    let lo = ratios.iter().cloned().fold(f64::MAX, f64::min);
    let hi = ratios.iter().cloned().fold(0.0, f64::max);
    let med = median(ratios);
    let ms = |f: &dyn Fn(&Round) -> f64| median(rs.iter().map(f).collect()) / 1e6;
    eprintln!(
        "{name}: CPU verify {:.2} ms, rollback {:.3} ms; rollback/verify median {:.2} % \
         [min {:.2}, max {:.2}] over {timed} rounds (wall: verify {:.2} ms, rollback {:.3} ms)",
        ms(&|r| r.verify_cpu),
        ms(&|r| r.rollback_cpu),
        100.0 * med,
        100.0 * lo,
        100.0 * hi,
        ms(&|r| r.verify_wall),
        ms(&|r| r.rollback_wall),
    );
    med
}

#[test]
fn rollback_costs_under_five_percent_of_a_16_token_verify_pass_at_a3b_dims() {
    // Three GDN layers and one attention layer: the real model's 3:1 mix
    // (only GDN layers replay).
    let tm = TinyModel::random(a3b_layer_config(4, 8), 3);
    let model = tm.model();
    let share = rollback_share("a3b dims", &model, 50, 9);
    assert!(share < 0.05, "rollback is {:.2} % of verify", 100.0 * share);
}

#[test]
fn rollback_costs_under_eight_percent_of_a_16_token_verify_pass_on_a_small_synth_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small.gguf");
    synth::plan(SynthOptions {
        arch: Arch::CloverMoe,
        preset: Preset::Small,
        recipe: Recipe::Q4KM,
        seed: 11,
    })
    .unwrap()
    .write(&path, None)
    .unwrap();
    let file = GgufFile::open(&path).unwrap();
    let model = Model::load(&file).unwrap();
    let share = rollback_share("small file", &model, 4000, 15);
    assert!(share < 0.08, "rollback is {:.2} % of verify", 100.0 * share);
}

#[cfg(target_os = "linux")]
#[test]
fn the_thread_cpu_clock_counts_work_and_not_sleep() {
    let c0 = cpu_ns();
    std::thread::sleep(std::time::Duration::from_millis(30));
    let slept = cpu_ns() - c0;
    let c1 = cpu_ns();
    let mut x = 0u64;
    let w = Instant::now();
    while w.elapsed().as_millis() < 30 {
        x = x.wrapping_add(std::hint::black_box(1));
    }
    let worked = cpu_ns() - c1;
    std::hint::black_box(x);
    assert!(slept < 5_000_000, "sleeping 30 ms cost {slept} ns of CPU");
    assert!(
        worked > 1_000_000,
        "spinning 30 ms cost only {worked} ns of CPU"
    );
}
