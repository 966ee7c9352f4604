//! Q3_K, Q4_K, Q5_K, Q6_K, Q8_0 and IQ4_XS tensors repacked at load (`kernels::repack`):
//! the loader repacks the matrices and expert stacks of those types when the
//! kernel table has the product, and the model's outputs stay those of the
//! file's layout to rounding. (Speculative greedy decoding on such files is exact:
//! `tests/spec_greedy.rs`.)

mod skip;

use clover::gguf::GgufFile;
use clover::model::weights::GateUp;
use clover::model::{LogitsFor, Model, ModelConfig, StateOptions, WeightRef};
use clover::synth::{self, Arch, Preset, Recipe, SynthOptions};
use kernels::{GgmlType, KernelTable, Rows};

fn small(dir: &std::path::Path, recipe: Recipe) -> std::path::PathBuf {
    let path = dir.join("small.gguf");
    synth::plan(SynthOptions {
        arch: Arch::CloverMoe,
        preset: Preset::Small,
        recipe,
        seed: 4,
    })
    .unwrap()
    .write(&path, None)
    .unwrap();
    path
}

fn repack_available(ty: GgmlType) -> bool {
    std::env::var("CLOVER_REPACK").as_deref() != Ok("0")
        && kernels::KernelTable::chosen()
            .packed_gemm(ty, kernels::Mode::Decode)
            .is_some()
}

/// Whether the loader repacks matrix `t` (a product for its type, whole
/// groups of rows, a type and shape the loader copies).
fn packs(t: &clover::gguf::TensorInfo) -> bool {
    repack_available(t.ty)
        && t.dims.len() > 1
        && kernels::repack::packable(t.ty, t.dims[0] as usize, t.dims[1] as usize)
}

/// The file's first `n_layer` layers (and its output head), bound with or
/// without the loader's repacked copies.
fn bind(file: &GgufFile, n_layer: usize, packed: bool) -> Model<'_> {
    let mut config = ModelConfig::from_metadata(|k| file.get(k)).unwrap();
    config.n_layer = n_layer;
    config.layer_kinds.truncate(n_layer);
    let derived = file.derived_tensors().expect("the file was loaded");
    let kt = KernelTable::chosen();
    let lookup = |name: &str| {
        file.tensor(name).map(|t| WeightRef {
            name: t.name,
            ty: t.ty,
            dims: t.dims.to_vec(),
            data: t.data,
            // As the loader binds them.
            rows: Rows::of(
                kt.layout(t.ty, t.dims.len() != 2),
                derived.get(name).filter(|_| packed),
            ),
        })
    };
    Model::bind(config, kt, &lookup).unwrap()
}

fn logits(model: &Model, tokens: &[u32]) -> Vec<f32> {
    let mut st = model.new_state(StateOptions::new(256)).unwrap();
    model
        .forward(&mut st, tokens, 0, LogitsFor::All)
        .unwrap()
        .to_vec()
}

/// One layer (GDN + MoE) and the head, with and without the repacked rows:
/// only the f32 order of the repacked products differs (their integer sums
/// are exact), before any later layer's activation quantisation can turn a
/// one-ulp change into a different Q8 level. (Measured on the IQ4_XS file:
/// the layer's output moves by about one ulp and the head's Q8_0 activations
/// absorb it, so the logits are equal; over all eight layers of this random
/// file they move by about 1 % of their range, exactly as much as between
/// the AVX2 and AVX-512 kernels, from one such flip.)
fn one_layer_logits_agree(file: &GgufFile) {
    let tokens = [100u32, 200, 300, 7, 4000, 12];
    let (with, without) = (bind(file, 1, true), bind(file, 1, false));
    // The products see the repacked rows only when bound with them.
    let gate = |m: &Model| match &m.weights.layers[0].ffn.gate_up {
        GateUp::Split { gate, .. } => gate.q().packed().is_some(),
        GateUp::Fused(gate_up) => gate_up.q().packed().is_some(),
    };
    assert!(gate(&with) && !gate(&without));
    let a = logits(&with, &tokens);
    let b = logits(&without, &tokens);
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = a
        .iter()
        .zip(&b)
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    eprintln!("one layer: max |logit difference| {diff:e} of max |logit| {scale}");
    assert!(diff <= 1e-5 * scale, "{diff} vs {scale}");
}

#[test]
fn repacked_iq4_xs_experts_give_the_file_layouts_logits_to_rounding() {
    let dir = tempfile::tempdir().unwrap();
    let file = GgufFile::open(&small(dir.path(), Recipe::Iq4XsExpsHq)).unwrap();
    let n_layer = ModelConfig::from_metadata(|k| file.get(k)).unwrap().n_layer;
    Model::load(&file).unwrap();
    let packed = file.derived_tensors().expect("the file was loaded");
    if !repack_available(GgmlType::IQ4_XS) {
        assert!(packed.is_empty());
        skip::skipped(
            "repacked IQ4_XS",
            "no repacked IQ4_XS kernel on this CPU",
            "needs AVX-512 VNNI + VBMI",
        );
        return;
    }
    // Three IQ4_XS expert stacks per layer; nothing else is IQ4_XS (the
    // file's other matrices are repacked too where their products exist).
    let iq4: Vec<&str> = packed
        .names()
        .into_iter()
        .filter(|k| file.tensor(k).unwrap().ty == GgmlType::IQ4_XS)
        .collect();
    assert_eq!(iq4.len(), 3 * n_layer, "{iq4:?}");
    assert!(iq4.iter().all(|k| k.contains("_exps.")));
    for t in file.tensors().iter().filter(|t| t.ty != GgmlType::IQ4_XS) {
        let want = packs(t) && t.name != "token_embd.weight";
        assert_eq!(packed.contains(&t.name), want, "{}", t.name);
    }
    one_layer_logits_agree(&file);
}

#[test]
fn repacked_q4_k_matrices_give_the_file_layouts_logits_to_rounding() {
    let dir = tempfile::tempdir().unwrap();
    let file = GgufFile::open(&small(dir.path(), Recipe::Q4KM)).unwrap();
    Model::load(&file).unwrap();
    let packed = file.derived_tensors().expect("the file was loaded");
    if !repack_available(GgmlType::Q4_K) {
        assert!(packed.is_empty());
        skip::skipped(
            "repacked Q4_K",
            "no repacked Q4_K kernel on this CPU",
            "needs AVX-512 VNNI",
        );
        return;
    }
    // Every Q4_K matrix but the token embedding (a lookup; the file has its
    // own output head), the 8-row ssm_beta included; the Q5_K, Q6_K and
    // Q8_0 ones too where those products exist.
    for t in file.tensors() {
        let want = (t.ty == GgmlType::Q4_K || packs(t)) && t.name != "token_embd.weight";
        assert_eq!(packed.contains(&t.name), want, "{}", t.name);
    }
    assert!(packed.contains("blk.0.ssm_beta.weight"));
    one_layer_logits_agree(&file);
}

#[test]
fn repacked_q3_k_and_q6_k_matrices_give_the_file_layouts_logits_to_rounding() {
    // The full apex-miniplus mix: Q3_K experts, Q6_K projections and head,
    // Q8_0 gates and the Q5_K shared expert.
    // The loader evicts a mapped file's repacked tensors from memory
    // (`tests/gguf_reader.rs` checks the eviction); the file's layout
    // read afterwards comes back from the disk, the same bytes.
    let dir = tempfile::tempdir().unwrap();
    let file = GgufFile::open(&small(dir.path(), Recipe::ApexMiniPlus)).unwrap();
    Model::load(&file).unwrap();
    let packed = file.derived_tensors().expect("the file was loaded");
    if !(repack_available(GgmlType::Q3_K) && repack_available(GgmlType::Q6_K)) {
        skip::skipped(
            "repacked Q3_K / Q6_K",
            "no repacked Q3_K / Q6_K kernel on this CPU",
            "needs AVX-512 VNNI and GFNI",
        );
        return;
    }
    for t in file.tensors() {
        let want = (matches!(t.ty, GgmlType::Q3_K | GgmlType::Q6_K) || packs(t))
            && t.name != "token_embd.weight";
        assert_eq!(packed.contains(&t.name), want, "{}", t.name);
    }
    // The Q5_K shared expert and the Q8_0 gates are copied for the batched
    // passes, and their mat-vecs keep reading the file's rows in the
    // copy's order (`keeps_file_rows`).
    for (name, ty) in [
        ("blk.0.ffn_gate_shexp.weight", GgmlType::Q5_K),
        ("blk.0.attn_gate.weight", GgmlType::Q8_0),
    ] {
        let t = file.tensor(name).unwrap();
        assert_eq!(t.ty, ty, "{name}");
        assert!(packed.contains(name), "{name}");
        assert!(
            clover::model::load::keeps_file_rows(KernelTable::chosen(), t.ty, t.dims),
            "{name}"
        );
    }
    one_layer_logits_agree(&file);
}
