//! Importance matrices in llama.cpp's GGUF imatrix format.
//!
//! A file written by `llama-imatrix` (or `clover imatrix`) holds, per weight
//! tensor `NAME`, two f32 tensors:
//!
//! - `NAME.in_sum2` `{n_in, n_mat}` (`{n_in}` when `n_mat` = 1): per input column, the sum of the squared
//!   activations that met the weight, one block per expert of a stack
//!   (`n_mat` = 1 for a dense matrix);
//! - `NAME.counts` `{1, n_mat}` (`{1}`): how many activation rows each block summed;
//!
//! plus `general.type` = "imatrix", `imatrix.datasets` (the text files),
//! `imatrix.chunk_count` and `imatrix.chunk_size` (u32). Tensors are written
//! sorted by name. A quantizer weighs column `j` of block `m` by
//! `in_sum2[m][j] / counts[m]` (1 where a block saw no rows), as
//! llama-quantize does.

use std::collections::BTreeMap;
use std::path::Path;

use kernels::GgmlType;

use crate::gguf::writer::GgufWriter;
use crate::gguf::{GgufFile, Value, ValueType};
use crate::model::capture::Entry;

pub const KEY_DATASETS: &str = "imatrix.datasets";
pub const KEY_CHUNK_COUNT: &str = "imatrix.chunk_count";
pub const KEY_CHUNK_SIZE: &str = "imatrix.chunk_size";
const SUMS: &str = ".in_sum2";
const COUNTS: &str = ".counts";

/// An importance matrix: what was collected and on what.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Imatrix {
    pub entries: BTreeMap<String, Entry>,
    pub datasets: Vec<String>,
    pub chunk_count: u32,
    pub chunk_size: u32,
}

impl Imatrix {
    /// Writes the file (atomically: nothing is left behind on failure).
    pub fn save(&self, path: &Path) -> std::io::Result<u64> {
        let mut w = GgufWriter::new();
        w.pad_last = true;
        w.set("general.type", Value::String("imatrix".into()));
        w.set(
            KEY_DATASETS,
            Value::Array(
                ValueType::String,
                self.datasets
                    .iter()
                    .map(|d| Value::String(d.clone()))
                    .collect(),
            ),
        );
        w.set(KEY_CHUNK_COUNT, Value::U32(self.chunk_count));
        w.set(KEY_CHUNK_SIZE, Value::U32(self.chunk_size));
        let mut data: Vec<Vec<f32>> = Vec::new();
        for (name, e) in &self.entries {
            let n_mat = e.counts.len() as u64;
            if n_mat == 0 || e.sums.is_empty() {
                continue;
            }
            // ggml writes a tensor's dimensions up to its last one above 1.
            let dims = |d: [u64; 2]| if d[1] == 1 { vec![d[0]] } else { d.to_vec() };
            w.add_tensor(
                format!("{name}{SUMS}"),
                GgmlType::F32,
                &dims([e.sums.len() as u64 / n_mat, n_mat]),
            );
            w.add_tensor(format!("{name}{COUNTS}"), GgmlType::F32, &dims([1, n_mat]));
            data.push(e.sums.clone());
            data.push(e.counts.iter().map(|&c| c as f32).collect());
        }
        w.write_to_path(path, |i, _, out| {
            out.write_all(bytemuck::cast_slice(&data[i]))
        })
    }

    /// Reads a GGUF imatrix file; one line of error for anything else.
    pub fn load(path: &Path) -> Result<Imatrix, String> {
        let file = GgufFile::open(path).map_err(|e| {
            format!(
                "{}: not a GGUF imatrix file ({e}); the legacy .dat format is not read, convert it with llama-imatrix --in-file",
                path.display()
            )
        })?;
        let u32_of = |k: &str| match file.get(k) {
            Some(Value::U32(v)) => Some(*v),
            Some(Value::I32(v)) => u32::try_from(*v).ok(),
            _ => None,
        };
        let datasets = match file.get(KEY_DATASETS) {
            Some(Value::Array(_, items)) => items
                .iter()
                .filter_map(|v| match v {
                    Value::String(s) => Some(s.clone()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        let (Some(chunk_count), Some(chunk_size)) =
            (u32_of(KEY_CHUNK_COUNT), u32_of(KEY_CHUNK_SIZE))
        else {
            return Err(format!(
                "{}: missing imatrix metadata ({KEY_CHUNK_COUNT}, {KEY_CHUNK_SIZE})",
                path.display()
            ));
        };
        let floats = |name: &str| -> Result<Option<Vec<f32>>, String> {
            let Some(t) = file.tensor(name) else {
                return Ok(None);
            };
            if t.ty != GgmlType::F32 {
                return Err(format!("{}: {name} is {}, not F32", path.display(), t.ty));
            }
            Ok(Some(
                t.data
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            ))
        };
        let mut entries = BTreeMap::new();
        for t in file.tensors() {
            let Some(name) = t.name.strip_suffix(SUMS) else {
                if !t.name.ends_with(COUNTS) {
                    return Err(format!(
                        "{}: unexpected tensor {} in an imatrix file",
                        path.display(),
                        t.name
                    ));
                }
                continue;
            };
            let sums = floats(&t.name)?.unwrap_or_default();
            let counts = floats(&format!("{name}{COUNTS}"))?
                .ok_or_else(|| format!("{}: {name} has sums but no counts", path.display()))?;
            if counts.is_empty() || sums.len() % counts.len() != 0 {
                return Err(format!(
                    "{}: {name}: {} sums do not split into {} blocks",
                    path.display(),
                    sums.len(),
                    counts.len()
                ));
            }
            let counts = counts.iter().map(|&c| c.round().max(0.0) as u64).collect();
            entries.insert(name.to_string(), Entry { sums, counts });
        }
        for t in file.tensors() {
            if let Some(name) = t.name.strip_suffix(COUNTS) {
                if !entries.contains_key(name) {
                    return Err(format!("{}: {name} has counts but no sums", path.display()));
                }
            }
        }
        if entries.is_empty() {
            return Err(format!("{}: no data in the imatrix file", path.display()));
        }
        Ok(Imatrix {
            entries,
            datasets,
            chunk_count,
            chunk_size,
        })
    }

    /// The quantizer's weights for tensor `name`: per block, sums over
    /// count (1 for a block that saw no rows), as llama-quantize computes
    /// them when it loads the file.
    pub fn weights(&self, name: &str) -> Option<Vec<f32>> {
        let e = self.entries.get(name)?;
        let n = e.sums.len() / e.counts.len();
        let mut out = vec![1.0f32; e.sums.len()];
        for (m, &c) in e.counts.iter().enumerate() {
            if c > 0 {
                let c = c as f32;
                for (o, &s) in out[m * n..(m + 1) * n]
                    .iter_mut()
                    .zip(&e.sums[m * n..(m + 1) * n])
                {
                    *o = s / c;
                }
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Imatrix {
        let mut entries = BTreeMap::new();
        entries.insert(
            "blk.0.ffn_down_exps.weight".to_string(),
            Entry {
                sums: vec![2.0, 4.0, 9.0, 3.0, 5.0, 7.0],
                counts: vec![2, 3, 0],
            },
        );
        entries.insert(
            "blk.0.attn_qkv.weight".to_string(),
            Entry {
                sums: vec![1.5, 0.25, 8.0],
                counts: vec![4],
            },
        );
        Imatrix {
            entries,
            datasets: vec!["corpus.txt".into()],
            chunk_count: 3,
            chunk_size: 64,
        }
    }

    #[test]
    fn a_saved_file_loads_back_the_same_and_is_sorted_gguf() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("im.gguf");
        let im = sample();
        im.save(&p).unwrap();
        assert_eq!(Imatrix::load(&p).unwrap(), im);
        let f = GgufFile::open(&p).unwrap();
        let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "blk.0.attn_qkv.weight.in_sum2",
                "blk.0.attn_qkv.weight.counts",
                "blk.0.ffn_down_exps.weight.in_sum2",
                "blk.0.ffn_down_exps.weight.counts"
            ]
        );
        assert_eq!(f.tensors()[2].dims, vec![2, 3]);
        assert_eq!(f.tensors()[3].dims, vec![1, 3]);
        assert_eq!(
            f.get("general.type"),
            Some(&Value::String("imatrix".into()))
        );
    }

    #[test]
    fn weights_are_sums_over_counts_and_one_where_nothing_was_seen() {
        let im = sample();
        assert_eq!(
            im.weights("blk.0.ffn_down_exps.weight").unwrap(),
            vec![1.0, 2.0, 3.0, 1.0, 1.0, 1.0]
        );
        assert_eq!(
            im.weights("blk.0.attn_qkv.weight").unwrap(),
            vec![0.375, 0.0625, 2.0]
        );
        assert!(im.weights("blk.1.attn_qkv.weight").is_none());
    }

    #[test]
    fn files_that_are_not_imatrices_are_one_line_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.gguf");
        std::fs::write(&p, b"not a gguf").unwrap();
        let e = Imatrix::load(&p).unwrap_err();
        assert!(
            e.contains("not a GGUF imatrix file") && !e.contains('\n'),
            "{e}"
        );
        // A GGUF without the imatrix keys.
        let mut w = GgufWriter::new();
        w.pad_last = true;
        w.set("general.type", Value::String("imatrix".into()));
        w.add_tensor("a.in_sum2", GgmlType::F32, &[2, 1]);
        w.write_to_path(&p, |_, _, out| out.write_all(&[0u8; 8]))
            .unwrap();
        let e = Imatrix::load(&p).unwrap_err();
        assert!(e.contains("missing imatrix metadata"), "{e}");
    }
}
