//! Binding a model to a GGUF file: metadata through `ModelConfig`, tensors
//! zero-copy through `WeightRef`s over the file's bytes.

use kernels::plan::BatchOrder;
use kernels::Mode;
use std::collections::HashMap;

use kernels::repack;
use rayon::prelude::*;
use thiserror::Error;

use crate::gguf::GgufFile;

use super::config::{ConfigError, ModelConfig};
use super::forward::Model;
use super::weights::{WeightError, WeightRef};

#[derive(Debug, Error)]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Weights(#[from] WeightError),
}

impl<'a> Model<'a> {
    /// The model stored in `file` (weights borrowed from its mapping).
    ///
    /// Q4_K and IQ4_XS matrices are also repacked for the active kernel
    /// table's product when it has one ([`repack_for_kernels`]): a second
    /// copy of those tensors in memory, made once per file.
    pub fn load(file: &'a GgufFile) -> Result<Model<'a>, LoadError> {
        let config = ModelConfig::from_metadata(|k| file.get(k))?;
        let packed = file.derived(repack_for_kernels);
        let lookup = |name: &str| {
            file.tensor(name).map(|t| WeightRef {
                name: t.name,
                ty: t.ty,
                dims: t.dims.to_vec(),
                data: t.data,
                packed: packed.get(name).map(|p| bytemuck::cast_slice(p.as_slice())),
            })
        };
        Ok(Model::bind(config, &lookup)?)
    }
}

/// Rows repacked per task.
const REPACK_ROWS: usize = 64 * repack::ROWS;

/// The file's matrices and expert stacks (`{n_in, n_out}` or
/// `{n_in, n_out, n_expert}`, `n_in % 256 == 0`, `n_out % 8 == 0`) of the
/// types the active kernel table has a repacked product for (on AVX-512 with
/// VNNI: Q4_K, and IQ4_XS with VBMI too), in the layout of
/// `kernels::repack`, by tensor name; else nothing. A stack's experts are
/// consecutive rows, so the whole stack repacks as one matrix, expert after
/// expert. The token embedding is left alone unless it is also the output
/// head (no `output.weight`): a lookup reads the file's rows.
///
/// `CLOVER_REPACK=0` never repacks, `1` always does; by default a file is
/// repacked only when it and the copy fit in 80 % of the machine's memory.
pub fn repack_for_kernels(file: &GgufFile) -> HashMap<String, Vec<u64>> {
    let mut out = HashMap::new();
    let mode = std::env::var("CLOVER_REPACK").ok();
    let kt = kernels::isa::active();
    // llama.cpp's batch order takes no repacked product.
    if mode.as_deref() == Some("0") || BatchOrder::from_env() == BatchOrder::Ggml {
        return out;
    }
    let tied = file.tensor("output.weight").is_none();
    let todo: Vec<(&crate::gguf::TensorInfo, usize, usize, usize)> = file
        .tensors()
        .iter()
        .filter(|t| kt.packed_gemm(t.ty, Mode::Decode).is_some())
        .filter(|t| tied || t.name != "token_embd.weight")
        .filter_map(|t| {
            let (n_in, n_out, n_expert) = match t.dims.as_slice() {
                [a, b] => (*a, *b, 1),
                [a, b, c] => (*a, *b, *c),
                _ => return None,
            };
            let (n_in, rows) = (n_in as usize, n_out.checked_mul(n_expert)? as usize);
            let rb = t.ty.row_bytes(n_in as u64)? as usize;
            let ok = repack::packable(t.ty, n_in, n_out as usize)
                && file.view(t).data.len() >= rb.checked_mul(rows)?;
            ok.then_some((t, n_in, rows, rb))
        })
        .collect();
    let total: usize = todo
        .iter()
        .map(|&(t, n_in, rows, _)| repack::packed_bytes(t.ty, n_in, rows))
        .sum();
    if mode.as_deref() != Some("1") {
        let need = file.file_size() as u128 + total as u128;
        if mem_total().is_some_and(|m| need * 10 > m as u128 * 8) {
            return out;
        }
    }
    for (t, n_in, rows, rb) in todo {
        let src = file.view(t).data;
        let size = repack::packed_bytes(t.ty, n_in, rows);
        let mut words = vec![0u64; size.div_ceil(8)];
        let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut words);
        let per_group = repack::packed_bytes(t.ty, n_in, repack::ROWS);
        dst[..size]
            .par_chunks_mut(per_group * (REPACK_ROWS / repack::ROWS))
            .enumerate()
            .for_each(|(c, d)| {
                let n_rows = d.len() / per_group * repack::ROWS;
                let first = c * REPACK_ROWS;
                let src = &src[first * rb..(first + n_rows) * rb];
                repack::repack(t.ty, n_in, n_rows, src, d);
            });
        out.insert(t.name.clone(), words);
    }
    out
}

/// The machine's memory in bytes (`MemTotal` of `/proc/meminfo`), if known.
fn mem_total() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}
