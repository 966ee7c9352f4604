//! A `tiny` synthetic model (built once per recipe, in memory) whose tensor data is overwritten
//! by the input, loaded through `Model::load` and run one token forward. Any weights must load
//! or fail with a typed error, and the forward must return logits or an error; never panic.
//! NaN / Inf logits are allowed here.
//!
//! Input layout: byte 0 picks the recipe (`% 5`: F32, BF16, Q4_K_M, IQ4_XS experts, APEX mix),
//! bytes 1-2 the token id (`u16` LE, may be out of the vocabulary), bytes 3-6 where in the
//! tensor data to start writing (`u32` LE, modulo its length); the rest is written there.
#![no_main]

use std::sync::OnceLock;

use clover::gguf::GgufFile;
use clover::model::{LogitsFor, Model, StateOptions};
use clover::synth::{self, Arch, Preset, Recipe, SynthOptions};
use libfuzzer_sys::fuzz_target;

const RECIPES: [Recipe; 5] = [
    Recipe::F32,
    Recipe::Bf16,
    Recipe::Q4KM,
    Recipe::Iq4XsExpsHq,
    Recipe::ApexMiniPlus,
];

/// The synthetic file's bytes and where its tensor data starts.
struct Base {
    bytes: Vec<u8>,
    data_start: usize,
}

fn base(recipe: usize) -> &'static Base {
    static BASES: [OnceLock<Base>; 5] = [const { OnceLock::new() }; 5];
    BASES[recipe].get_or_init(|| {
        let plan = synth::plan(SynthOptions {
            arch: Arch::CloverMoe,
            preset: Preset::Tiny,
            recipe: RECIPES[recipe],
            seed: 7,
        })
        .expect("plan the tiny model");
        let mut bytes = Vec::new();
        plan.writer
            .write(&mut bytes, |i, _, out| {
                synth::weights::write_tensor(7, i, &plan.specs[i], plan.types[i], plan.fill, out)
            })
            .expect("write the tiny model");
        let file = GgufFile::from_bytes(bytes.clone()).expect("read the tiny model back");
        let data_start = file
            .tensors()
            .iter()
            .map(|t| t.offset)
            .min()
            .expect("the tiny model has tensors") as usize;
        Base { bytes, data_start }
    })
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 7 {
        return;
    }
    let base = base(usize::from(data[0]) % RECIPES.len());
    let token = u32::from(u16::from_le_bytes([data[1], data[2]]));
    let data_len = base.bytes.len() - base.data_start;
    let at = base.data_start
        + u32::from_le_bytes([data[3], data[4], data[5], data[6]]) as usize % data_len;
    let mut bytes = base.bytes.clone();
    let payload = &data[7..];
    let n = payload.len().min(bytes.len() - at);
    bytes[at..at + n].copy_from_slice(&payload[..n]);
    let Ok(file) = GgufFile::from_bytes(bytes) else {
        return;
    };
    let Ok(model) = Model::load(&file) else {
        return;
    };
    let Ok(mut state) = model.new_state(StateOptions::new(8)) else {
        return;
    };
    if let Ok(logits) = model.forward(&mut state, &[token], 0, LogitsFor::Last) {
        assert_eq!(logits.len(), model.n_vocab());
    }
});
