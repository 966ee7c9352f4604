//! A debugging aid, not a check: with `CLOVER_DUMP_MODEL=FILE`,
//! `CLOVER_DUMP_TOKENS=1,2,3` and `CLOVER_DUMP_DIR=DIR`, runs one batch
//! (f32 K/V, AVX2 tier unless `CLOVER_ISA` says otherwise) and leaves the
//! intermediate tensors in DIR under ggml's names, to diff against
//! `llama_logits dump` (scripts/oracle/llama_logits.c). Without the
//! variables it does nothing.
use clover::gguf::GgufFile;
use clover::kernels::{self, GgmlType, Isa};
use clover::model::{LogitsFor, Model, StateOptions};

#[test]
fn dumps_intermediate_tensors_when_asked() {
    let (Some(path), Some(toks)) = (
        std::env::var_os("CLOVER_DUMP_MODEL"),
        std::env::var("CLOVER_DUMP_TOKENS").ok(),
    ) else {
        return;
    };
    if std::env::var_os("CLOVER_ISA").is_none() && Isa::Avx2.available() {
        std::env::set_var("CLOVER_ISA", "avx2");
    }
    kernels::plan::BatchOrder::Ggml.choose();
    eprintln!("tier {}", kernels::isa::init().unwrap().name());
    let tokens: Vec<u32> = toks.split(',').map(|t| t.trim().parse().unwrap()).collect();
    let file = GgufFile::open(std::path::Path::new(&path)).unwrap();
    let model = Model::load(&file).unwrap();
    let mut so = StateOptions::new(tokens.len() + 8);
    so.max_batch = tokens.len();
    (so.type_k, so.type_v) = (GgmlType::F32, GgmlType::F32);
    let mut st = model.new_state(so).unwrap();
    model.forward(&mut st, &tokens, 0, LogitsFor::All).unwrap();
}
