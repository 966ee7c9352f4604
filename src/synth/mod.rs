//! `clover synth`: valid random-weight model files of any size, in either
//! architecture, with the exact metadata and tensors of docs/DESIGN.md §1.
//!
//! - `presets`: the shapes (`tiny`, `small`, `a3b-4l`, `full`);
//! - `tensors`: the tensor list of §1.2 for a shape;
//! - `recipes`: which ggml type each tensor is written in;
//! - `tokenizer_gen`: a small byte-level BPE vocabulary with real merges;
//! - `weights`: deterministic weights, generated and encoded chunk by chunk
//!   while the file streams out (a 20 GB file never sits in memory).

pub mod direct;
pub mod presets;
pub mod recipes;
pub mod rng;
pub mod tensors;
pub mod tokenizer_gen;
pub mod weights;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::Path;

use kernels::GgmlType;

use crate::gguf::writer::align_up;
use crate::gguf::{GgufWriter, Value};

pub use presets::{Arch, Dims, Preset};
pub use recipes::Recipe;
pub use tensors::{Role, TensorSpec};
pub use tokenizer_gen::Vocab;

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("writing {path}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("thread pool: {0}")]
    Threads(String),
}

/// What to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SynthOptions {
    pub arch: Arch,
    pub preset: Preset,
    pub recipe: Recipe,
    pub seed: u64,
}

/// A fully planned file: metadata, tensors and their types.
#[derive(Clone, Debug)]
pub struct Plan {
    pub options: SynthOptions,
    pub dims: Dims,
    pub specs: Vec<TensorSpec>,
    pub types: Vec<GgmlType>,
    pub writer: GgufWriter,
    /// How values are drawn and encoded; `Fill::for_preset` unless changed.
    pub fill: weights::Fill,
    /// Check the written file loads before it replaces the target
    /// (`clover synth` sets it; tests that write broken files on purpose
    /// leave it off).
    pub check_loadable: bool,
}

/// Plans a file: nothing is generated or written.
pub fn plan(options: SynthOptions) -> Result<Plan, SynthError> {
    plan_blocks(options, false)
}

/// Plans a file whose trunk is followed by a multi-token-prediction block,
/// as llama.cpp's converter writes a checkpoint's (`--mtp`). The trunk's
/// tensors and values are those of [`plan`]'s file.
pub fn plan_mtp(options: SynthOptions) -> Result<Plan, SynthError> {
    plan_blocks(options, true)
}

fn plan_blocks(options: SynthOptions, mtp: bool) -> Result<Plan, SynthError> {
    let dims = Dims::for_preset(options.preset, options.arch);
    let vocab = tokenizer_gen::build_vocab(dims.vocab).map_err(SynthError::Tokenizer)?;
    let mut specs = tensors::tensor_specs(options.arch, &dims);
    if mtp {
        specs.extend(tensors::mtp_block_specs(options.arch, &dims));
    }
    let types: Vec<GgmlType> = specs
        .iter()
        .map(|t| {
            let n_gqa = dims.n_head / dims.n_head_kv.max(1);
            options
                .recipe
                .type_for(t, dims.n_layer, dims.n_expert, n_gqa)
        })
        .collect();
    let mut writer = GgufWriter::new();
    set_metadata(&mut writer, &options, &dims, &vocab);
    if mtp {
        let k = |s: &str| format!("{}.{s}", options.arch.name());
        writer.set(k("block_count"), Value::U32(dims.n_layer as u32 + 1));
        writer.set(k("nextn_predict_layers"), Value::U32(1));
    }
    for (t, ty) in specs.iter().zip(&types) {
        writer.add_tensor(t.name.clone(), *ty, &t.ne);
    }
    Ok(Plan {
        options,
        dims,
        specs,
        types,
        writer,
        fill: weights::Fill::for_preset(options.preset),
        check_loadable: false,
    })
}

fn set_metadata(w: &mut GgufWriter, o: &SynthOptions, d: &Dims, v: &Vocab) {
    let a = o.arch.name();
    let u = |x: usize| Value::U32(x as u32);
    w.set("general.architecture", Value::str(a));
    w.set(
        "general.name",
        Value::str(format!(
            "{a}-synth-{}-{}-seed{}",
            o.preset, o.recipe, o.seed
        )),
    );
    w.set("general.alignment", Value::U32(32));
    w.set("general.file_type", Value::U32(o.recipe.file_type()));
    let k = |s: &str| format!("{a}.{s}");
    w.set(k("block_count"), u(d.n_layer));
    w.set(k("context_length"), Value::U32(d.context_length));
    w.set(k("embedding_length"), u(d.d_model));
    w.set(k("attention.head_count"), u(d.n_head));
    w.set(k("attention.head_count_kv"), u(d.n_head_kv));
    w.set(k("attention.key_length"), u(d.head_dim));
    w.set(k("attention.value_length"), u(d.head_dim));
    w.set(k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6));
    w.set(k("rope.freq_base"), Value::F32(1e7));
    w.set(k("rope.dimension_count"), u(d.rope_dims));
    w.set(k("rope.dimension_sections"), Value::i32s(d.rope_sections));
    w.set(k("expert_count"), u(d.n_expert));
    w.set(k("expert_used_count"), u(d.n_expert_used));
    w.set(k("expert_feed_forward_length"), u(d.ff_exp));
    w.set(k("expert_shared_feed_forward_length"), u(d.ff_shexp));
    w.set(k("ssm.conv_kernel"), u(d.conv_left));
    w.set(k("ssm.state_size"), u(d.ssm_state));
    w.set(k("ssm.group_count"), u(d.ssm_groups));
    w.set(k("ssm.time_step_rank"), u(d.ssm_v_heads));
    w.set(k("ssm.inner_size"), u(d.ssm_inner()));
    w.set(k("full_attention_interval"), u(d.full_attention_interval));
    if o.arch.is_clover() {
        w.set(k("ssm.conv_kernel_right"), u(d.conv_right));
        w.set(
            k("diffusion.block_size"),
            Value::U32(d.diffusion_block_size),
        );
    }
    w.set("tokenizer.ggml.model", Value::str("gpt2"));
    w.set("tokenizer.ggml.pre", Value::str("qwen35"));
    w.set(
        "tokenizer.ggml.tokens",
        Value::strings(v.tokens.iter().cloned()),
    );
    w.set(
        "tokenizer.ggml.token_type",
        Value::i32s(v.token_types.iter().copied()),
    );
    w.set(
        "tokenizer.ggml.merges",
        Value::strings(v.merges.iter().cloned()),
    );
    w.set("tokenizer.ggml.bos_token_id", Value::U32(v.bos));
    w.set("tokenizer.ggml.eos_token_id", Value::U32(v.eos));
    w.set("tokenizer.ggml.padding_token_id", Value::U32(v.pad));
    if o.arch.is_clover() {
        w.set("tokenizer.ggml.mask_token_id", Value::U32(v.mask));
    }
    w.set("tokenizer.ggml.add_bos_token", Value::Bool(false));
    w.set(
        "tokenizer.chat_template",
        Value::str(tokenizer_gen::CHAT_TEMPLATE),
    );
}

/// Bytes a metadata value takes on disk (without its type tag).
fn value_bytes(v: &Value) -> u64 {
    match v {
        Value::String(s) => 8 + s.len() as u64,
        Value::Array(_, items) => 4 + 8 + items.iter().map(value_bytes).sum::<u64>(),
        other => other.value_type().fixed_size().unwrap_or(0) as u64,
    }
}

impl Plan {
    /// Writes `sections` as `rope.dimension_sections` in place of the
    /// preset's (which rotate every pair): for parity tests of files whose
    /// sections leave pairs unrotated (docs/DESIGN.md §2.4). Weights are unchanged.
    pub fn set_rope_sections(&mut self, sections: [i32; 4]) {
        self.dims.rope_sections = sections;
        let key = format!("{}.rope.dimension_sections", self.options.arch.name());
        self.writer.set(key, Value::i32s(sections));
    }

    pub fn n_tensors(&self) -> usize {
        self.specs.len()
    }

    pub fn n_parameters(&self) -> u64 {
        self.specs.iter().map(|t| t.n_elements()).sum()
    }

    /// The exact size of the file `write` produces.
    pub fn file_bytes(&self) -> u64 {
        // Magic, version, tensor count, kv count, then each key and value.
        let mut n = 4 + 4 + 8 + 8;
        for (k, v) in self.writer.metadata() {
            n += 8 + k.len() as u64 + 4 + value_bytes(v);
        }
        for t in &self.specs {
            n += 8 + t.name.len() as u64 + 4 + 8 * t.ne.len() as u64 + 4 + 8;
        }
        let align = self.writer.alignment;
        n = align_up(n, align);
        let last = self.specs.len().saturating_sub(1);
        for (i, (t, ty)) in self.specs.iter().zip(&self.types).enumerate() {
            let rows = t.n_rows();
            n += ty.row_bytes(t.ne[0]).unwrap_or(0) * rows;
            if i < last {
                n = align_up(n, align);
            }
        }
        n
    }

    /// Tensor count and bytes per type.
    pub fn type_mix(&self) -> BTreeMap<GgmlType, (usize, u64)> {
        let mut mix = BTreeMap::new();
        for (t, ty) in self.specs.iter().zip(&self.types) {
            let e = mix.entry(*ty).or_insert((0usize, 0u64));
            e.0 += 1;
            e.1 += ty.row_bytes(t.ne[0]).unwrap_or(0) * t.n_rows();
        }
        mix
    }

    /// The human-readable plan printed by `--dry-run`.
    pub fn summary(&self) -> String {
        let d = &self.dims;
        let o = &self.options;
        let n_attn = d.n_attention_layers();
        let mut s = String::new();
        let _ = writeln!(s, "architecture: {}", o.arch);
        let _ = writeln!(s, "preset: {}", o.preset);
        let _ = writeln!(s, "recipe: {}", o.recipe);
        let _ = writeln!(s, "seed: {}", o.seed);
        let _ = writeln!(s, "fill: {}", self.fill.name());
        let _ = writeln!(
            s,
            "layers: {} ({} gated-deltanet, {} full-attention)",
            d.n_layer,
            d.n_layer - n_attn,
            n_attn
        );
        let _ = writeln!(
            s,
            "embedding: {}, attention heads {}/{} of dim {}, gdn heads {}/{} of dim {}",
            d.d_model, d.n_head, d.n_head_kv, d.head_dim, d.ssm_groups, d.ssm_v_heads, d.ssm_state
        );
        let _ = writeln!(
            s,
            "experts: {} ({} used), expert ffn {}, shared ffn {}",
            d.n_expert, d.n_expert_used, d.ff_exp, d.ff_shexp
        );
        let _ = writeln!(s, "vocab: {}", d.vocab);
        let _ = writeln!(s, "context: {}", d.context_length);
        for (ty, (count, bytes)) in self.type_mix() {
            let _ = writeln!(s, "type {ty}: {count} tensors, {bytes} bytes");
        }
        let _ = writeln!(s, "bytes: {}", self.file_bytes());
        let _ = writeln!(s, "tensors: {}", self.n_tensors());
        let _ = writeln!(s, "parameters: {}", self.n_parameters());
        s
    }

    /// One TSV line per tensor: name, type, shape (ne order, comma-separated).
    pub fn tensor_table(&self) -> String {
        let mut s = String::from("name\ttype\tshape\n");
        for (t, ty) in self.specs.iter().zip(&self.types) {
            let shape: Vec<String> = t.ne.iter().map(|d| d.to_string()).collect();
            let _ = writeln!(s, "{}\t{ty}\t{}", t.name, shape.join(","));
        }
        s
    }

    /// Generates and writes the file, on a pool of `threads` threads (all
    /// cores when `None`). The bytes do not depend on the thread count.
    /// Returns the number of bytes written.
    pub fn write(&self, path: &Path, threads: Option<usize>) -> Result<u64, SynthError> {
        self.write_with_progress(path, threads, |_, _| {})
    }

    /// `write`, calling `progress(tensors_done, tensors_total)` after each tensor.
    pub fn write_with_progress(
        &self,
        path: &Path,
        threads: Option<usize>,
        mut progress: impl FnMut(usize, usize) + Send,
    ) -> Result<u64, SynthError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.unwrap_or(0))
            .build()
            .map_err(|e| SynthError::Threads(e.to_string()))?;
        let seed = self.options.seed;
        let fill = self.fill;
        let check = |p: &Path| match self.check_loadable {
            true => crate::engine::load::check_loadable(p),
            false => Ok(()),
        };
        pool.install(|| {
            self.writer.write_to_path_checked(
                path,
                |i, _plan, out| {
                    weights::write_tensor(seed, i, &self.specs[i], self.types[i], fill, out)?;
                    progress(i + 1, self.specs.len());
                    Ok(())
                },
                check,
            )
        })
        .map_err(|source| SynthError::Io {
            path: path.display().to_string(),
            source,
        })
    }
}
