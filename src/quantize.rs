//! `clover quantize`: a GGUF file's tensors re-encoded in llama-quantize's
//! mixes, streamed (source mapped, one tensor's chunks quantized on all
//! threads, written in order through the streaming writer).
//!
//! What llama-quantize does, and so what this does, for the output to be the
//! same bytes:
//! - metadata: the source's keys in order, `split.*` dropped, then
//!   `general.quantization_version` (2) and `general.file_type` last;
//! - tensor order: llama.cpp's loader order, tensors outside any block first,
//!   then block by block, by name within each;
//! - shapes: without trailing 1s (ggml's `ggml_n_dims`), so a converter's
//!   `{n_embd, 1}` shared-expert gate is written `{n_embd}`;
//! - types: the mix's rule for each tensor ([`crate::synth::Recipe::type_for`],
//!   checked against llama-quantize by `scripts/compare_llama_quantize.sh`),
//!   then `--tensor-type` / `--output-tensor-type` / `--token-embedding-type`,
//!   then the fallback for rows that are not whole blocks;
//! - data: each row converted to f32 and quantized by the reference
//!   quantizers (`kernels::scalar::quantize_chunk_row`: ggml's
//!   `ggml_quantize_chunk` bit for bit), weighted by the importance matrix
//!   when one is given (per expert for a stack); a tensor that keeps its type
//!   is copied;
//! - with `--imatrix`: the `quantize.imatrix.*` keys after the file type, and
//!   the two `ffn_down` rules that depend on it.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::Path;

use kernels::GgmlType;
use rayon::prelude::*;

use crate::gguf::writer::GgufWriter;
use crate::gguf::{GgufFile, Value};
use crate::imatrix::Imatrix;
use crate::synth::tensors::{tensor_specs, Role, TensorSpec};
use crate::synth::{Arch, Dims, Preset, Recipe};

/// How `clover quantize` chooses types.
#[derive(Clone, Debug)]
pub struct QuantizeOptions {
    /// The mix (a llama-quantize type name maps to one of these).
    pub recipe: Recipe,
    /// `--pure`: every quantizable tensor in the mix's default type.
    pub pure: bool,
    /// `--tensor-type PATTERN=TYPE`: the first pattern that matches a
    /// tensor's name (a regular expression, searched) sets its type.
    pub tensor_types: Vec<(regex::Regex, GgmlType)>,
    pub output_type: Option<GgmlType>,
    pub token_embd_type: Option<GgmlType>,
    /// Quantize tensors that already are (else refused).
    pub allow_requantize: bool,
    /// `--imatrix FILE`: the importance matrix and its path as given (the
    /// path is recorded in the output's metadata).
    pub imatrix: Option<(Imatrix, String)>,
}

#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// llama-quantize's type names (any case) and the mix each stands for.
pub const TYPE_NAMES: [(&str, Recipe); 8] = [
    ("F32", Recipe::F32),
    ("F16", Recipe::F16),
    ("BF16", Recipe::Bf16),
    ("Q8_0", Recipe::Q8_0),
    ("Q4_0", Recipe::Q4_0),
    ("Q4_K_M", Recipe::Q4KM),
    ("Q6_K", Recipe::Q6K),
    ("IQ4_XS", Recipe::Iq4Xs),
];

/// The mix of a llama-quantize type name.
pub fn recipe_of_type_name(s: &str) -> Option<Recipe> {
    TYPE_NAMES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(s))
        .map(|&(_, r)| r)
}

/// A tensor's role and block from its name (the names `clover synth` writes,
/// which are llama.cpp's for both architectures, and an MTP block's
/// `nextn.*`); `None` for other names.
pub fn role_of(name: &str) -> Option<(Role, Option<usize>)> {
    static ROLES: std::sync::OnceLock<HashMap<String, Role>> = std::sync::OnceLock::new();
    let roles = ROLES.get_or_init(|| {
        // Every name a file can hold: a clover_moe model has both layer
        // kinds and every tensor qwen35moe has.
        let d = Dims::for_preset(Preset::Tiny, Arch::CloverMoe);
        let mut roles: HashMap<String, Role> = tensor_specs(Arch::CloverMoe, &d)
            .into_iter()
            .map(|t| {
                let suffix = match t.layer {
                    Some(il) => t.name[format!("blk.{il}.").len()..].to_string(),
                    None => t.name,
                };
                (suffix, t.role)
            })
            .collect();
        // An MTP block's own tensors, as llama.cpp's converter names them.
        for (suffix, role) in [
            ("nextn.eh_proj.weight", Role::NextnEhProj),
            ("nextn.enorm.weight", Role::NextnNorm),
            ("nextn.hnorm.weight", Role::NextnNorm),
            ("nextn.shared_head_norm.weight", Role::NextnNorm),
            ("nextn.embed_tokens.weight", Role::NextnMatrix),
            ("nextn.shared_head_head.weight", Role::NextnMatrix),
        ] {
            roles.insert(suffix.to_string(), role);
        }
        roles
    });
    match block_of(name) {
        Some((il, suffix)) => roles.get(suffix).map(|&r| (r, Some(il))),
        None => roles.get(name).map(|&r| (r, None)),
    }
}

/// `blk.N.rest` → (N, rest).
fn block_of(name: &str) -> Option<(usize, &str)> {
    let rest = name.strip_prefix("blk.")?;
    let (n, suffix) = rest.split_once('.')?;
    Some((n.parse().ok()?, suffix))
}

/// llama.cpp's loader order: tensors outside any block first, then by block,
/// by name within one (`weight_name_comparer`).
fn loader_order(a: &str, b: &str) -> std::cmp::Ordering {
    let layer = |s: &str| block_of(s).map_or(-1, |(n, _)| n as i64);
    layer(a).cmp(&layer(b)).then_with(|| a.cmp(b))
}

/// One tensor of the output: where it comes from and what it becomes.
#[derive(Clone, Debug)]
pub struct Planned {
    pub name: String,
    pub dims: Vec<u64>,
    pub from: GgmlType,
    pub to: GgmlType,
    /// The quantizer's importance weights: `dims[0]` per matrix (one
    /// matrix per expert of a stack), from `--imatrix`.
    pub weights: Option<Vec<f32>>,
}

/// The output's metadata and tensors.
pub struct QuantizePlan {
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<Planned>,
    pub file_type: u32,
    /// Quantized tensors the importance matrix has no entry for.
    pub without_imatrix: Vec<String>,
}

fn meta_u32(file: &GgufFile, key: &str) -> Option<usize> {
    match file.get(key)? {
        Value::U32(v) => Some(*v as usize),
        Value::I32(v) => usize::try_from(*v).ok(),
        Value::U64(v) => usize::try_from(*v).ok(),
        _ => None,
    }
}

/// Chooses every tensor's type (see the module docs).
pub fn plan(file: &GgufFile, opts: &QuantizeOptions) -> Result<QuantizePlan, QuantizeError> {
    let arch = match file.get("general.architecture") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err(QuantizeError::Invalid("no general.architecture".into())),
    };
    let n_layer = meta_u32(file, &format!("{arch}.block_count")).unwrap_or(0);
    let n_expert = meta_u32(file, &format!("{arch}.expert_count")).unwrap_or(0);
    let n_head = meta_u32(file, &format!("{arch}.attention.head_count")).unwrap_or(0);
    let n_head_kv = meta_u32(file, &format!("{arch}.attention.head_count_kv")).unwrap_or(0);
    // llama.cpp's n_gqa(): 0 without KV heads.
    let n_gqa = n_head.checked_div(n_head_kv).unwrap_or(0);
    let mut infos: Vec<_> = file.tensors().iter().collect();
    infos.sort_by(|a, b| loader_order(&a.name, &b.name));
    let mut tensors = Vec::with_capacity(infos.len());
    let mut without_imatrix = Vec::new();
    if let Some((im, _)) = &opts.imatrix {
        for (name, e) in &im.entries {
            if e.sums.iter().any(|v| !v.is_finite()) {
                return Err(QuantizeError::Invalid(format!(
                    "the imatrix holds a non-finite value for {name}"
                )));
            }
        }
    }
    for t in infos {
        let spec = role_of(&t.name).map(|(role, layer)| TensorSpec {
            name: t.name.clone(),
            role,
            layer,
            ne: t.dims.clone(),
        });
        let quantizable = spec.as_ref().is_some_and(|s| s.role.is_quantizable());
        let mut to = match &spec {
            Some(s) if quantizable && opts.pure => {
                crate::synth::recipes::fallback(opts.recipe.default_type(), s.row_len())
            }
            Some(s) if quantizable => {
                opts.recipe
                    .type_for_with(s, n_layer, n_expert, n_gqa, opts.imatrix.is_some())
            }
            _ => t.ty,
        };
        if quantizable {
            // As llama-quantize: --token-embedding-type / --output-tensor-type
            // are taken as given; a --tensor-type match replaces the mix's
            // rule and still falls back for rows that are not whole blocks.
            let role = spec.as_ref().map(|s| s.role);
            let given = match role {
                Some(Role::Output) => opts.output_type,
                Some(Role::TokenEmbd) => opts.token_embd_type,
                _ => None,
            };
            let pattern = opts
                .tensor_types
                .iter()
                .find(|(re, _)| re.is_match(&t.name))
                .map(|&(_, ty)| ty);
            if let Some(ty) = given {
                to = ty;
            } else if let Some(ty) = pattern {
                to = crate::synth::recipes::fallback(ty, t.dims[0] as usize);
            }
        }
        let requant = !matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16);
        if to != t.ty && requant && !opts.allow_requantize {
            return Err(QuantizeError::Invalid(format!(
                "{} is already {}: requantizing loses quality twice (pass --allow-requantize to do it anyway)",
                t.name, t.ty
            )));
        }
        let mut weights = None;
        if let (Some((im, _)), true) = (&opts.imatrix, to != t.ty) {
            match im.weights(&t.name) {
                // llama-quantize's check: one weight per column per matrix
                // (the token embedding's mismatch is ignored).
                Some(w) if w.len() as u64 == t.dims[0] * t.dims.get(2).copied().unwrap_or(1) => {
                    weights = Some(w)
                }
                Some(w) if !t.name.starts_with("token_embd.") => {
                    return Err(QuantizeError::Invalid(format!(
                        "the imatrix has {} values for {}, which needs {}: it was made for another model",
                        w.len(),
                        t.name,
                        t.dims[0] * t.dims.get(2).copied().unwrap_or(1)
                    )))
                }
                Some(_) => {}
                None => without_imatrix.push(t.name.clone()),
            }
        }
        tensors.push(Planned {
            name: t.name.clone(),
            // As llama-quantize writes shapes: without trailing 1s.
            dims: crate::model::weights::trim_unit_dims(&t.dims).to_vec(),
            from: t.ty,
            to,
            weights,
        });
    }
    let file_type = opts.recipe.file_type();
    let drop = |k: &str| {
        k.starts_with("split.") || k == "general.quantization_version" || k == "general.file_type"
    };
    let mut metadata: Vec<(String, Value)> = file
        .metadata()
        .iter()
        .filter(|(k, _)| !drop(k))
        .cloned()
        .collect();
    metadata.push(("general.quantization_version".into(), Value::U32(2)));
    metadata.push(("general.file_type".into(), Value::U32(file_type)));
    if let Some((im, path)) = &opts.imatrix {
        // llama-quantize's keys, in its order; strings cut to 127 bytes.
        let mut set = |k: &str, v: Value| match metadata.iter_mut().find(|(key, _)| key == k) {
            Some(slot) => slot.1 = v,
            None => metadata.push((k.to_string(), v)),
        };
        set(KEY_IMATRIX_FILE, Value::String(cut_127(path)));
        if let Some(d) = im.datasets.first() {
            set(KEY_IMATRIX_DATASET, Value::String(cut_127(d)));
        }
        set(KEY_IMATRIX_ENTRIES, Value::U32(im.entries.len() as u32));
        if im.chunk_count > 0 {
            set(KEY_IMATRIX_CHUNKS, Value::U32(im.chunk_count));
        }
    }
    Ok(QuantizePlan {
        metadata,
        tensors,
        file_type,
        without_imatrix,
    })
}

pub const KEY_IMATRIX_FILE: &str = "quantize.imatrix.file";
pub const KEY_IMATRIX_DATASET: &str = "quantize.imatrix.dataset";
pub const KEY_IMATRIX_ENTRIES: &str = "quantize.imatrix.entries_count";
pub const KEY_IMATRIX_CHUNKS: &str = "quantize.imatrix.chunks_count";

/// The first 127 bytes of `s` (llama-quantize's fixed-size override field),
/// never splitting a character.
fn cut_127(s: &str) -> String {
    let mut end = s.len().min(127);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Rows quantized per parallel task, and tasks in flight per tensor.
const CHUNK_ELEMS: usize = 1 << 16;
const CHUNKS_IN_FLIGHT: usize = 64;

/// The bytes of the rows in `src` (rows of `n` values of `from`, the first
/// one row `first` of its tensor) in `to`; `weights` holds `n` importance
/// weights per matrix of `per_matrix` rows.
fn convert_rows(
    from: GgmlType,
    to: GgmlType,
    n: usize,
    src: &[u8],
    first: usize,
    per_matrix: usize,
    weights: Option<&[f32]>,
) -> Vec<u8> {
    let in_row = from.row_bytes(n as u64).expect("checked by the reader") as usize;
    let out_row = to.row_bytes(n as u64).expect("checked by the plan") as usize;
    let rows = src.len() / in_row;
    let mut out = vec![0u8; rows * out_row];
    let mut f = vec![0f32; n];
    for (r, (s, d)) in src
        .chunks_exact(in_row)
        .zip(out.chunks_exact_mut(out_row))
        .enumerate()
    {
        let m = (first + r) / per_matrix.max(1);
        let w = weights.map(|w| &w[m * n..(m + 1) * n]);
        kernels::scalar::dequantize_row(from, s, &mut f);
        kernels::scalar::quantize_chunk_row(to, &f, d, w);
    }
    out
}

/// Writes `plan` for `file` to `path` (atomically: a temporary file renamed
/// into place), on the current rayon pool; `progress(tensors done, bytes
/// written)` after each tensor. Returns the bytes written.
pub fn write(
    file: &GgufFile,
    plan: &QuantizePlan,
    path: &Path,
    progress: &mut dyn FnMut(usize, u64),
) -> Result<u64, QuantizeError> {
    let mut w = GgufWriter::new();
    w.pad_last = true;
    for (k, v) in &plan.metadata {
        w.set(k.clone(), v.clone());
    }
    for t in &plan.tensors {
        if t.to.row_bytes(t.dims[0]).is_none() {
            return Err(QuantizeError::Invalid(format!(
                "{}: a row of {} values is not a whole number of {} blocks",
                t.name, t.dims[0], t.to
            )));
        }
        w.add_tensor(t.name.clone(), t.to, &t.dims);
    }
    let mut written = 0u64;
    let n = w.write_to_path_checked(
        path,
        |i, _, out: &mut dyn Write| {
            let t = &plan.tensors[i];
            let src = file
                .tensor(&t.name)
                .expect("planned from this file's tensors")
                .data;
            if t.from == t.to {
                out.write_all(src)?;
            } else {
                let row_len = t.dims[0] as usize;
                let in_row = t.from.row_bytes(row_len as u64).unwrap_or(0) as usize;
                let rows_per = (CHUNK_ELEMS / row_len.max(1)).max(1);
                let per = rows_per * in_row;
                let chunks: Vec<(usize, &[u8])> = src
                    .chunks(per.max(1))
                    .enumerate()
                    .map(|(i, c)| (i * rows_per, c))
                    .collect();
                let per_matrix = t.dims.get(1).copied().unwrap_or(1) as usize;
                for group in chunks.chunks(CHUNKS_IN_FLIGHT) {
                    let parts: Vec<Vec<u8>> = group
                        .par_iter()
                        .map(|&(first, c)| {
                            convert_rows(
                                t.from,
                                t.to,
                                row_len,
                                c,
                                first,
                                per_matrix,
                                t.weights.as_deref(),
                            )
                        })
                        .collect();
                    for p in parts {
                        out.write_all(&p)?;
                    }
                }
            }
            file.release_tensor(&t.name);
            written +=
                t.to.row_bytes(t.dims[0]).unwrap_or(0) * t.dims.iter().skip(1).product::<u64>();
            progress(i + 1, written);
            Ok(())
        },
        crate::engine::load::check_loadable,
    )?;
    Ok(n)
}
