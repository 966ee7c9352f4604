//! Binding a model to a GGUF file: metadata through `ModelConfig`, tensors
//! zero-copy through `WeightRef`s over the file's bytes.

use std::collections::HashMap;

use kernels::plan::{BatchOrder, Layout};
use kernels::repack;
use kernels::{KernelTable, Rows};
use rayon::prelude::*;
use thiserror::Error;

use crate::gguf::{Derived, GgufFile, TensorInfo};

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
    /// Q3_K, Q4_K, Q6_K and IQ4_XS matrices are also repacked for the active
    /// kernel table's product when it has one ([`repack_for_kernels`]): a
    /// copy of those tensors in memory, made once per file.
    pub fn load(file: &'a GgufFile) -> Result<Model<'a>, LoadError> {
        let kt = KernelTable::chosen();
        let config = ModelConfig::from_metadata(|k| file.get(k))?;
        let packed = file.derived(|f| Derived::owned(repack_for_kernels(kt, f, &mut |_, _| {})));
        let lookup = |name: &str| {
            file.tensor(name).map(|t| WeightRef {
                name: t.name,
                ty: t.ty,
                dims: t.dims.to_vec(),
                data: t.data,
                rows: Rows::of(kt.layout(t.ty, t.dims.len() != 2), packed.get(name)),
            })
        };
        Ok(Model::bind(config, kt, &lookup)?)
    }
}

/// Whether the loader keeps the file rows of a tensor of type `ty` and shape
/// `dims` in memory beside its repacked copy, for mat-vecs to read ([`kernels::matmul::QMatrix::with_file_matvec`]):
/// a plain matrix (not an expert stack, read a few experts at a time) of a
/// type whose file rows the kernels read with the repacked product's bits.
/// On AVX-512 that is Q5_K, Q6_K and Q8_0 (docs/PERFORMANCE.md, "Batched
/// passes"). Q6_K: a mat-vec streams its file rows faster from
/// memory than the repacked ones (`packed_stream`), while batches of
/// several rows want the repacked product, so both are kept: the file's
/// Q6_K projections and head stay in memory beside their copies, which
/// costs memory and saves time per token where one thread does not
/// saturate memory (figures in docs/PERFORMANCE.md).
pub fn keeps_file_rows(kt: &KernelTable, ty: kernels::GgmlType, dims: &[u64]) -> bool {
    kt.layout(ty, dims.len() != 2) == Layout::PackedAndFileRows
}

/// Rows repacked per task.
const REPACK_ROWS: usize = 64 * repack::ROWS;

/// The file's matrices and expert stacks (`{n_in, n_out}` or
/// `{n_in, n_out, n_expert}`, `n_in % 256 == 0`, `n_out % 8 == 0`) of the
/// types the active kernel table has a repacked product for (on AVX-512 with
/// VNNI: Q4_K, IQ4_XS with VBMI too, Q3_K and Q6_K with GFNI), in the layout of
/// `kernels::repack`, by tensor name; else nothing. A stack's experts are
/// consecutive rows, so the whole stack repacks as one matrix, expert after
/// expert. The token embedding is left alone unless it is also the output
/// head (no `output.weight`): a lookup reads the file's rows.
///
/// One tensor the loader repacks: its name, type, row length, rows (all
/// experts of a stack) and the bytes of its repacked copy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packed {
    pub name: String,
    pub ty: kernels::GgmlType,
    pub n_in: usize,
    pub rows: usize,
    /// Bytes of the copy as held: the layout's bytes rounded up to 8.
    pub bytes: usize,
    /// The copy alone, or the file's rows beside it.
    pub layout: Layout,
}

/// What [`repack_for_kernels`] repacks of `file`, in file order; empty
/// when the active kernel table repacks nothing of it, or repacking is off
/// (`CLOVER_REPACK=0`, or llama.cpp's batch order, which takes no repacked
/// product). Whether the copies fit in memory is not asked here.
pub fn packed_plan(kt: &KernelTable, file: &GgufFile) -> Vec<Packed> {
    let mode = std::env::var("CLOVER_REPACK").ok();
    if mode.as_deref() == Some("0") || BatchOrder::chosen() == BatchOrder::Ggml {
        return Vec::new();
    }
    let tied = file.tensor("output.weight").is_none();
    file.tensors()
        .iter()
        .filter(|t| kt.layout(t.ty, t.dims.len() != 2) != Layout::FileRows)
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
            ok.then(|| Packed {
                name: t.name.clone(),
                ty: t.ty,
                n_in,
                rows,
                bytes: repack::packed_bytes(t.ty, n_in, rows).next_multiple_of(8),
                layout: kt.layout(t.ty, t.dims.len() != 2),
            })
        })
        .collect()
}

/// Whether the loader reads tensor `t` from a repacked copy only (the file's
/// rows are not read again once it is made): a tensor of `plan` whose file
/// rows are not kept ([`Layout::Packed`]), other than a tied embedding.
pub fn reads_copy_only(plan: &[Packed], t: &TensorInfo) -> bool {
    t.name != "token_embd.weight"
        && plan
            .iter()
            .any(|p| p.name == t.name && p.layout == Layout::Packed)
}

/// The repacked copies ([`packed_plan`]) in memory, in the layout of
/// `kernels::repack`, by tensor name, telling `progress(bytes done, total)`
/// after each tensor. A stack's experts are consecutive rows, so the whole
/// stack repacks as one matrix, expert after expert. The token embedding is
/// left alone unless it is also the output head (no `output.weight`): a
/// lookup reads the file's rows.
///
/// `CLOVER_REPACK=1` always repacks; by default a file is repacked only
/// when what stays of it and the copies fit in 80 % of the machine's memory.
/// Of a mapped file (not locked by `--mlock`) the tensors repacked leave
/// memory as they are copied ([`GgufFile::evict_tensor`]): the full
/// apex-miniplus file then holds its copies and only the file's tensors the
/// copies do not replace, where the file and the copies would not fit on
/// 24 GiB together. A read file (`--no-mmap`) and a locked one keep all
/// their bytes, so they count whole. The copies ask for 2 MiB pages
/// (`MADV_HUGEPAGE`): the experts are read at random, and in 4 KiB pages
/// every one of them is a run of TLB misses.
pub fn repack_for_kernels(
    kt: &KernelTable,
    file: &GgufFile,
    progress: &mut dyn FnMut(u64, u64),
) -> HashMap<String, Vec<u64>> {
    let mut out = HashMap::new();
    let plan = packed_plan(kt, file);
    let evict = file.is_mapped() && !crate::gguf::pages::mlock();
    let evictable = |t: &TensorInfo| evict && reads_copy_only(&plan, t);
    let total: usize = plan.iter().map(|p| p.bytes).sum();
    let freed: u64 = file
        .tensors()
        .iter()
        .filter(|t| evictable(t))
        .map(|t| t.n_bytes)
        .sum();
    if std::env::var("CLOVER_REPACK").ok().as_deref() != Some("1") {
        let need = (file.file_size() - freed) as u128 + total as u128;
        if mem_total().is_some_and(|m| need * 10 > m as u128 * 8) {
            return out;
        }
    }
    let mut done = 0;
    for p in &plan {
        let t = file.tensor_info(&p.name).expect("planned from this file");
        let src = file.view(t).data;
        let rb = t.ty.row_bytes(p.n_in as u64).expect("checked by the plan") as usize;
        let size = repack::packed_bytes(t.ty, p.n_in, p.rows);
        let mut words = huge_page_words(p.bytes / 8);
        let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut words);
        let per_group = repack::packed_bytes(t.ty, p.n_in, repack::ROWS);
        dst[..size]
            .par_chunks_mut(per_group * (REPACK_ROWS / repack::ROWS))
            .enumerate()
            .for_each(|(c, d)| {
                let n_rows = d.len() / per_group * repack::ROWS;
                let first = c * REPACK_ROWS;
                let src = &src[first * rb..(first + n_rows) * rb];
                repack::repack(t.ty, p.n_in, n_rows, src, d);
            });
        if evictable(t) {
            file.evict_tensor(&t.name);
        }
        out.insert(t.name.clone(), words);
        done += p.bytes;
        progress(done as u64, total as u64);
    }
    out
}

/// `len` zeroed words, their memory asked to come in 2 MiB pages
/// (`MADV_HUGEPAGE`, before the first touch) where the system has them.
fn huge_page_words(len: usize) -> Vec<u64> {
    let mut words: Vec<u64> = Vec::with_capacity(len);
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let (p, bytes) = (words.as_mut_ptr() as usize, len * 8);
        let start = p.next_multiple_of(HUGE);
        let end = (p + bytes) / HUGE * HUGE;
        if end > start {
            // SAFETY: the range lies inside this vector's own allocation (its
            // capacity); the advice changes how pages are provided, not
            // their contents, and none has been touched yet.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
    words.resize(len, 0);
    words
}

/// The machine's memory in bytes (`MemTotal` of `/proc/meminfo`), if known.
fn mem_total() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}
