//! docs/DESIGN.md §5 on a synth `small` file (GDN head dim 64, so the replay's
//! vector paths run whole 8-lane chunks): committing k of 16 verified
//! positions leaves the GDN states bit-for-bit equal to a plain forward over
//! those k tokens, and the next logits equal.

use clover::gguf::GgufFile;
use clover::model::{LogitsFor, Model, StateOptions};
use clover::synth::{self, Arch, Preset, Recipe, SynthOptions};

fn opts() -> StateOptions {
    let mut o = StateOptions::new(64);
    o.max_batch = 16;
    o
}

#[test]
fn committing_k_of_16_verified_positions_equals_a_plain_forward_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("small.gguf");
    synth::plan(SynthOptions {
        arch: Arch::CloverMoe,
        preset: Preset::Small,
        recipe: Recipe::Q4KM,
        seed: 2,
    })
    .unwrap()
    .write(&path, None)
    .unwrap();
    let file = GgufFile::open(&path).unwrap();
    let model = Model::load(&file).unwrap();
    let prompt = [11u32, 400, 7, 2048, 99];
    let block: Vec<u32> = (0..16u32).map(|i| (i * 263 + 17) % 4000).collect();
    let n = prompt.len();
    for n_keep in [1usize, 5, 16] {
        // Plain: the kept tokens one at a time.
        let mut plain = model.new_state(opts()).unwrap();
        model
            .forward(&mut plain, &prompt, 0, LogitsFor::Last)
            .unwrap();
        for (i, &t) in block[..n_keep].iter().enumerate() {
            model
                .forward(&mut plain, &[t], n + i, LogitsFor::Last)
                .unwrap();
        }
        let want = model
            .forward(&mut plain, &[3], n + n_keep, LogitsFor::Last)
            .unwrap()
            .to_vec();

        let mut st = model.new_state(opts()).unwrap();
        model.forward(&mut st, &prompt, 0, LogitsFor::Last).unwrap();
        model
            .forward_verify(&mut st, &block, n, LogitsFor::All)
            .unwrap();
        model.commit_verify(&mut st, n_keep).unwrap();
        let got = model
            .forward(&mut st, &[3], n + n_keep, LogitsFor::Last)
            .unwrap()
            .to_vec();
        assert!(
            st.recurrent == plain.recurrent,
            "states differ, n_keep {n_keep}"
        );
        assert!(got == want, "logits differ, n_keep {n_keep}");
    }
}
