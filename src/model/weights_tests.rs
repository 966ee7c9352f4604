//! Binding: errors name the tensor, tied output, MTP block skipped.

use crate::model::config::ModelConfig;
use crate::model::forward::Model;
use crate::model::state::StateOptions;
use crate::model::tiny::*;
use crate::model::{LogitsFor, WeightError};
use kernels::GgmlType;

fn bind(tm: &TinyModel) -> Result<Model<'_>, WeightError> {
    Model::bind(tm.cfg.clone(), kernels::KernelTable::chosen(), &|n| {
        tm.lookup(n)
    })
}

#[test]
fn missing_tensor_error_names_it() {
    let mut tm = TinyModel::random(tiny_config(4, 2), 51);
    tm.tensors.remove("blk.2.ssm_a");
    assert_eq!(
        bind(&tm).unwrap_err(),
        WeightError::Missing("blk.2.ssm_a".into())
    );
}

#[test]
fn wrong_shape_error_names_the_tensor_and_both_shapes() {
    let mut tm = TinyModel::random(tiny_config(4, 2), 52);
    tm.set("blk.1.attn_k.weight", Tensor::f32(&[32, 16], &[0.0; 512]));
    let e = bind(&tm).unwrap_err();
    assert_eq!(
        e,
        WeightError::Shape {
            name: "blk.1.attn_k.weight".into(),
            expected: vec![32, 32],
            found: vec![32, 16],
        }
    );
    assert!(e.to_string().contains("blk.1.attn_k.weight"));
}

#[test]
fn short_data_is_an_error_naming_the_tensor() {
    let mut tm = TinyModel::random(tiny_config(4, 2), 53);
    let mut t = Tensor::f32(&[32, 6], &[0.0; 192]);
    t.dims = vec![32, 7];
    tm.set("blk.0.ffn_gate_inp.weight", t);
    let e = bind(&tm).unwrap_err().to_string();
    assert!(e.contains("blk.0.ffn_gate_inp.weight"), "{e}");
}

#[test]
fn activation_only_types_are_rejected_as_weights() {
    let mut tm = TinyModel::random(tiny_config(4, 2), 54);
    let mut t = Tensor::f32(&[32, 6], &[0.0; 192]);
    t.ty = GgmlType::Q8_K;
    tm.set("blk.0.ffn_gate_inp.weight", t);
    assert_eq!(
        bind(&tm).unwrap_err(),
        WeightError::Type {
            name: "blk.0.ffn_gate_inp.weight".into(),
            ty: GgmlType::Q8_K,
        }
    );
}

#[test]
fn absent_output_weight_ties_to_token_embd() {
    let mut tm = TinyModel::random(tiny_config(4, 2), 55);
    let embd = tm.values("token_embd.weight");
    tm.set(
        "output.weight",
        Tensor::f32(&[32, TINY_VOCAB as u64], &embd),
    );
    let model = tm.model();
    let mut st = model.new_state(StateOptions::new(8)).unwrap();
    let explicit = model
        .forward(&mut st, &[1, 2, 3], 0, LogitsFor::Last)
        .unwrap()
        .to_vec();
    tm.tensors.remove("output.weight");
    let model = tm.model();
    let mut st = model.new_state(StateOptions::new(8)).unwrap();
    let tied = model
        .forward(&mut st, &[1, 2, 3], 0, LogitsFor::Last)
        .unwrap();
    assert_eq!(explicit, tied);
}

#[test]
fn a_trailing_mtp_block_is_skipped() {
    let mut cfg = tiny_config(5, 2);
    cfg.n_layer_all = 5;
    let tm = TinyModel::random(cfg, 56);
    let mut tm = tm;
    // blk.4 is an MTP block: mark it and strip its GDN tensors.
    tm.set(
        "blk.4.nextn.eh_proj.weight",
        Tensor::f32(&[64, 32], &[0.0; 2048]),
    );
    tm.tensors.remove("blk.4.attn_qkv.weight");
    let model = tm.model();
    assert_eq!(model.config.n_layer, 4);
    assert_eq!(model.weights.layers.len(), 4);
    // The block is not whole: the trunk runs, and MTP drafting says why not.
    assert!(model.weights.mtp.is_none());
    let why = model.weights.mtp_unusable.as_ref().unwrap().to_string();
    assert!(why.contains("blk.4."), "{why}");
}

#[test]
fn tiny_metadata_round_trips_through_the_config_reader() {
    let tm = TinyModel::random(tiny_config(4, 2), 57);
    let meta = tm.metadata();
    let cfg =
        ModelConfig::from_metadata(|k| meta.iter().find(|(n, _)| n == k).map(|(_, v)| v)).unwrap();
    assert_eq!(cfg, tm.cfg);
}

#[test]
fn a_model_loaded_from_gguf_bytes_gives_the_in_memory_logits() {
    let tm = TinyModel::random(tiny_config(4, 2), 58);
    let mut bytes = Vec::new();
    tm.write_gguf(&mut bytes).unwrap();
    let file = crate::gguf::GgufFile::from_bytes(bytes).unwrap();
    let loaded = Model::load(&file).unwrap();
    assert_eq!(loaded.config, tm.cfg);
    let mem = tm.model();
    let mut a = mem.new_state(StateOptions::new(8)).unwrap();
    let mut b = loaded.new_state(StateOptions::new(8)).unwrap();
    let want = mem.forward(&mut a, &[4, 9, 33], 0, LogitsFor::All).unwrap();
    let got = loaded
        .forward(&mut b, &[4, 9, 33], 0, LogitsFor::All)
        .unwrap();
    assert_eq!(got, want);
}

#[test]
fn loading_a_file_with_a_missing_tensor_names_it() {
    let mut tm = TinyModel::random(tiny_config(4, 2), 59);
    tm.tensors.remove("blk.3.attn_k_norm.weight");
    let mut bytes = Vec::new();
    tm.write_gguf(&mut bytes).unwrap();
    let file = crate::gguf::GgufFile::from_bytes(bytes).unwrap();
    let e = Model::load(&file).unwrap_err().to_string();
    assert_eq!(e, "missing tensor blk.3.attn_k_norm.weight");
}
