//! GGUF v3 writer: metadata and tensor infos up front, tensor data streamed to
//! disk one tensor at a time (so a 20 GB file never sits in memory).

use std::io::{self, BufWriter, Write};
use std::path::Path;

use kernels::GgmlType;

use super::value::Value;

pub const GGUF_MAGIC: &[u8; 4] = b"GGUF";
pub const GGUF_VERSION: u32 = 3;
pub const DEFAULT_ALIGNMENT: u64 = 32;
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// ggml's `GGML_MAX_NAME` less its terminating NUL.
pub const MAX_TENSOR_NAME_LEN: usize = 63;

/// A tensor to be written: its name, type and shape in ggml `ne` order.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorPlan {
    pub name: String,
    pub ty: GgmlType,
    pub dims: Vec<u64>,
}

impl TensorPlan {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Bytes of data, or an error when the first dimension is not a whole number
    /// of blocks.
    pub fn n_bytes(&self) -> io::Result<u64> {
        let ne0 = self.dims.first().copied().unwrap_or(1);
        let rows = self
            .dims
            .iter()
            .skip(1)
            .try_fold(1u64, |a, &d| a.checked_mul(d));
        self.ty
            .row_bytes(ne0)
            .zip(rows)
            .and_then(|(r, rows)| r.checked_mul(rows))
            .ok_or_else(|| {
                invalid(format!(
                    "tensor {}: {} elements per row is not a whole number of {} blocks",
                    self.name, ne0, self.ty
                ))
            })
    }
}

/// Builds a GGUF file: set metadata, add tensors, then `write` streams it out.
#[derive(Clone, Debug)]
pub struct GgufWriter {
    pub alignment: u64,
    /// Pad the last tensor's data to the alignment too, as ggml's
    /// `gguf_write_to_file` and llama-quantize do (gguf-py does not).
    pub pad_last: bool,
    metadata: Vec<(String, Value)>,
    tensors: Vec<TensorPlan>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter::new()
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl GgufWriter {
    pub fn new() -> Self {
        GgufWriter {
            alignment: DEFAULT_ALIGNMENT,
            pad_last: false,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// Sets a metadata key, replacing an earlier value of the same key.
    pub fn set(&mut self, key: impl Into<String>, value: Value) {
        let key = key.into();
        if key == ALIGNMENT_KEY {
            if let Some(a) = value.as_u64() {
                self.alignment = a;
            }
        }
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key, value)),
        }
    }

    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    pub fn add_tensor(&mut self, name: impl Into<String>, ty: GgmlType, dims: &[u64]) {
        self.tensors.push(TensorPlan {
            name: name.into(),
            ty,
            dims: dims.to_vec(),
        });
    }

    pub fn tensors(&self) -> &[TensorPlan] {
        &self.tensors
    }

    /// Writes the whole file. `fill(i, plan, out)` must write exactly
    /// `plan.n_bytes()` bytes of tensor `i`'s data; padding is added here.
    /// Returns the number of bytes written.
    pub fn write<W: Write>(
        &self,
        out: W,
        mut fill: impl FnMut(usize, &TensorPlan, &mut dyn Write) -> io::Result<()>,
    ) -> io::Result<u64> {
        self.validate()?;
        // An alignment set through the field alone still has to be recorded.
        let implied_key = self.alignment != DEFAULT_ALIGNMENT
            && !self.metadata.iter().any(|(k, _)| k == ALIGNMENT_KEY);
        let mut w = Counting { inner: out, n: 0 };
        w.write_all(GGUF_MAGIC)?;
        w.write_all(&GGUF_VERSION.to_le_bytes())?;
        w.write_all(&(self.tensors.len() as u64).to_le_bytes())?;
        let n_kv = self.metadata.len() as u64 + implied_key as u64;
        w.write_all(&n_kv.to_le_bytes())?;
        for (k, v) in &self.metadata {
            write_string(&mut w, k)?;
            w.write_all(&(v.value_type() as u32).to_le_bytes())?;
            write_value(&mut w, v)?;
        }
        if implied_key {
            // Checked to fit in a u32 by `validate`.
            let v = Value::U32(self.alignment as u32);
            write_string(&mut w, ALIGNMENT_KEY)?;
            w.write_all(&(v.value_type() as u32).to_le_bytes())?;
            write_value(&mut w, &v)?;
        }
        let mut offset = 0u64;
        let mut sizes = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            write_string(&mut w, &t.name)?;
            w.write_all(&(t.dims.len() as u32).to_le_bytes())?;
            for d in &t.dims {
                w.write_all(&d.to_le_bytes())?;
            }
            w.write_all(&t.ty.id().to_le_bytes())?;
            w.write_all(&offset.to_le_bytes())?;
            let size = t.n_bytes()?;
            sizes.push(size);
            offset = offset
                .checked_add(size)
                .and_then(|end| end.checked_next_multiple_of(self.alignment))
                .ok_or_else(|| invalid(format!("tensor {}: data offset overflows", t.name)))?;
        }
        pad_to(&mut w, self.alignment)?;
        for (i, t) in self.tensors.iter().enumerate() {
            let start = w.n;
            fill(i, t, &mut w)?;
            let wrote = w.n - start;
            if wrote != sizes[i] {
                return Err(invalid(format!(
                    "tensor {}: wrote {wrote} bytes, expected {}",
                    t.name, sizes[i]
                )));
            }
            if i + 1 < self.tensors.len() || self.pad_last {
                pad_to(&mut w, self.alignment)?;
            }
        }
        w.flush()?;
        Ok(w.n)
    }

    /// Refuses what the reader (and llama.cpp) would refuse: an alignment
    /// that is not a u32 power of two or disagrees with the
    /// `general.alignment` key, an empty key, tensor names that are too long
    /// or repeated, and shapes that are not 1 to 4 non-zero dimensions.
    fn validate(&self) -> io::Result<()> {
        if self.alignment == 0
            || !self.alignment.is_power_of_two()
            || self.alignment > u32::MAX as u64
        {
            return Err(invalid(format!(
                "alignment {} is not a power of two that fits in a u32",
                self.alignment
            )));
        }
        if let Some((_, v)) = self.metadata.iter().find(|(k, _)| k == ALIGNMENT_KEY) {
            if *v != Value::U32(self.alignment as u32) {
                return Err(invalid(format!(
                    "{ALIGNMENT_KEY} must be the u32 {} (llama.cpp reads it as u32), found {} {v}",
                    self.alignment,
                    v.value_type().name()
                )));
            }
        }
        if self.metadata.iter().any(|(k, _)| k.is_empty()) {
            return Err(invalid("a metadata key is empty".to_string()));
        }
        let mut names = std::collections::HashSet::new();
        for t in &self.tensors {
            if t.name.len() > MAX_TENSOR_NAME_LEN {
                return Err(invalid(format!(
                    "tensor {}: name longer than {MAX_TENSOR_NAME_LEN} bytes",
                    t.name
                )));
            }
            if !names.insert(t.name.as_str()) {
                return Err(invalid(format!("duplicate tensor name {}", t.name)));
            }
            if t.dims.is_empty() || t.dims.len() > 4 || t.dims.contains(&0) {
                return Err(invalid(format!(
                    "tensor {}: shape {:?} must have 1 to 4 dimensions, none of them 0",
                    t.name, t.dims
                )));
            }
        }
        Ok(())
    }

    /// Writes to `path` through a temporary file in the same folder that is
    /// renamed into place only when complete ([`crate::output::OutputFile`]), so
    /// a failure or an interruption never leaves a truncated model behind, and
    /// a path that is not a regular file is refused.
    pub fn write_to_path(
        &self,
        path: &Path,
        fill: impl FnMut(usize, &TensorPlan, &mut dyn Write) -> io::Result<()>,
    ) -> io::Result<u64> {
        self.write_to_path_checked(path, fill, |_| Ok(()))
    }

    /// [`GgufWriter::write_to_path`], with `check` run on the complete
    /// temporary file before it is renamed into place: an error leaves the
    /// target as it was and removes the temporary file.
    pub fn write_to_path_checked(
        &self,
        path: &Path,
        fill: impl FnMut(usize, &TensorPlan, &mut dyn Write) -> io::Result<()>,
        check: impl FnOnce(&Path) -> io::Result<()>,
    ) -> io::Result<u64> {
        let out = crate::output::OutputFile::create(path)?;
        let n = self.write(BufWriter::with_capacity(1 << 20, out.file()), fill)?;
        check(out.temp_path())?;
        out.commit()?;
        Ok(n)
    }
}

pub fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

struct Counting<W> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let k = self.inner.write(buf)?;
        self.n += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn pad_to<W: Write>(w: &mut Counting<W>, alignment: u64) -> io::Result<()> {
    let pad = align_up(w.n, alignment) - w.n;
    w.write_all(&vec![0u8; pad as usize])
}

fn write_string(w: &mut impl Write, s: &str) -> io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

fn write_value(w: &mut impl Write, v: &Value) -> io::Result<()> {
    match v {
        Value::U8(x) => w.write_all(&x.to_le_bytes()),
        Value::I8(x) => w.write_all(&x.to_le_bytes()),
        Value::U16(x) => w.write_all(&x.to_le_bytes()),
        Value::I16(x) => w.write_all(&x.to_le_bytes()),
        Value::U32(x) => w.write_all(&x.to_le_bytes()),
        Value::I32(x) => w.write_all(&x.to_le_bytes()),
        Value::F32(x) => w.write_all(&x.to_le_bytes()),
        Value::Bool(x) => w.write_all(&[*x as u8]),
        Value::String(s) => write_string(w, s),
        Value::U64(x) => w.write_all(&x.to_le_bytes()),
        Value::I64(x) => w.write_all(&x.to_le_bytes()),
        Value::F64(x) => w.write_all(&x.to_le_bytes()),
        Value::Array(t, items) => {
            w.write_all(&(*t as u32).to_le_bytes())?;
            w.write_all(&(items.len() as u64).to_le_bytes())?;
            for item in items {
                if item.value_type() != *t {
                    return Err(invalid(format!(
                        "array of {} holds a {}",
                        t.name(),
                        item.value_type().name()
                    )));
                }
                // A nested array is its own element type, count and items.
                write_value(w, item)?;
            }
            Ok(())
        }
    }
}
