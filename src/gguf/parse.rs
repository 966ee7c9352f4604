//! Parsing and validating a GGUF header. Every file is treated as hostile:
//! each count, length, shape, type and offset is checked before it is used,
//! with checked arithmetic, and nothing is allocated in proportion to a
//! number the file size does not justify.
//!
//! Layout (little endian): magic `GGUF`, version u32, tensor count u64, key
//! count u64; the keys (string key, u32 value type, value); the tensor infos
//! (string name, u32 n_dims, n_dims × u64 `ne`, u32 ggml type, u64 offset
//! relative to the data section); padding to the alignment; the data section.
//! A string is a u64 byte length and UTF-8 bytes; an array is a u32 element
//! type, a u64 count and the elements.

use std::collections::HashSet;

use kernels::GgmlType;

use super::error::GgufError;
use super::value::{Value, ValueType};
use super::writer::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC};

/// At most this many tensors (the largest MoE files have tens of thousands).
pub const MAX_TENSORS: u64 = 1 << 20;
/// At most this many metadata keys.
pub const MAX_KEYS: u64 = 1 << 20;
/// Longest metadata key, in bytes.
pub const MAX_KEY_LEN: u64 = 1 << 16;
/// Longest string value, in bytes (chat templates are tens of KiB).
pub const MAX_STRING_LEN: u64 = 1 << 26;
/// Most elements in one array (a vocabulary is ~250k strings).
pub const MAX_ARRAY_LEN: u64 = 1 << 24;
/// Deepest nesting of arrays inside arrays.
pub const MAX_ARRAY_DEPTH: usize = 8;
/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: u32 = 4;
/// ggml's `GGML_MAX_NAME` less its terminating NUL.
pub const MAX_TENSOR_NAME_LEN: u64 = super::writer::MAX_TENSOR_NAME_LEN as u64;

/// One tensor as described by the header, validated against the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub ty: GgmlType,
    /// ggml `ne` order: `dims[0]` is the contiguous dimension.
    pub dims: Vec<u64>,
    /// Absolute offset of the data in the file.
    pub offset: u64,
    pub n_bytes: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        // Checked at load time to fit in an i64.
        self.dims.iter().product()
    }
}

/// Smallest encoding of one key: length, one byte of name, type, a u8 value.
const MIN_KV_BYTES: u64 = 8 + 1 + 4 + 1;
/// Smallest encoding of one tensor info: name length, n_dims, one dim, type, offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 8 + 4 + 8;

/// Any integer value, widened without loss.
pub(super) fn int_as_i128(v: &Value) -> Option<i128> {
    match *v {
        Value::U8(x) => Some(x.into()),
        Value::I8(x) => Some(x.into()),
        Value::U16(x) => Some(x.into()),
        Value::I16(x) => Some(x.into()),
        Value::U32(x) => Some(x.into()),
        Value::I32(x) => Some(x.into()),
        Value::U64(x) => Some(x.into()),
        Value::I64(x) => Some(x.into()),
        _ => None,
    }
}

/// The byte alignment the kernels need to read a type's blocks in place:
/// 4 when the block holds an f32 (F32 itself, Q8_K's scale), 2 otherwise
/// (every other block starts with an f16 scale or is f16/bf16).
pub fn kernel_alignment(ty: GgmlType) -> u64 {
    match ty {
        GgmlType::F32 | GgmlType::Q8_K => 4,
        _ => 2,
    }
}

pub(super) struct Header {
    pub version: u32,
    pub alignment: u64,
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
}

/// A bounds-checked little-endian cursor.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: impl FnOnce() -> String) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.offset(),
                need: n,
                file_size: self.buf.len() as u64,
            });
        }
        let start = self.pos;
        // n <= remaining <= usize::MAX, so the cast is exact.
        self.pos += n as usize;
        Ok(&self.buf[start..self.pos])
    }

    fn array<const N: usize>(
        &mut self,
        what: impl FnOnce() -> String,
    ) -> Result<[u8; N], GgufError> {
        let b = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    fn u32(&mut self, what: impl FnOnce() -> String) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: impl FnOnce() -> String) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A length-prefixed UTF-8 string of at most `max` bytes.
    fn string(&mut self, max: u64, what: &dyn Fn() -> String) -> Result<String, GgufError> {
        let len_offset = self.offset();
        let len = self.u64(|| format!("length of {}", what()))?;
        if len > max {
            return Err(GgufError::StringTooLong {
                what: what(),
                offset: len_offset,
                len,
                max,
            });
        }
        let start = self.offset();
        let bytes = self.take(len, what)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => Err(GgufError::InvalidUtf8 {
                what: what(),
                offset: start,
            }),
        }
    }
}

pub(super) fn parse_header(buf: &[u8]) -> Result<Header, GgufError> {
    let mut c = Cursor { buf, pos: 0 };
    let magic: [u8; 4] = c.array(|| "magic".into())?;
    if &magic != GGUF_MAGIC {
        return Err(GgufError::BadMagic { found: magic });
    }
    let version = c.u32(|| "version".into())?;
    if version & 0xffff == 0 && version != 0 {
        return Err(GgufError::BigEndian { version });
    }
    if version != 2 && version != 3 {
        return Err(GgufError::UnsupportedVersion { version });
    }
    let n_tensors = c.u64(|| "tensor count".into())?;
    let n_kv = c.u64(|| "metadata key count".into())?;
    if n_tensors > MAX_TENSORS {
        return Err(GgufError::TooManyTensors {
            count: n_tensors,
            max: MAX_TENSORS,
        });
    }
    if n_kv > MAX_KEYS {
        return Err(GgufError::TooManyKeys {
            count: n_kv,
            max: MAX_KEYS,
        });
    }
    // Both counts are now small enough that these products cannot overflow.
    check_count_fits(&c, "tensors", n_tensors, MIN_TENSOR_INFO_BYTES)?;
    check_count_fits(&c, "metadata keys", n_kv, MIN_KV_BYTES)?;

    let mut metadata = Vec::with_capacity(n_kv as usize);
    let mut seen_keys = HashSet::with_capacity(n_kv as usize);
    for index in 0..n_kv {
        let key_offset = c.offset();
        let key = c.string(MAX_KEY_LEN, &|| format!("metadata key {index}"))?;
        if key.is_empty() {
            return Err(GgufError::EmptyKey {
                index,
                offset: key_offset,
            });
        }
        if !seen_keys.insert(key.clone()) {
            return Err(GgufError::DuplicateKey { key });
        }
        let type_offset = c.offset();
        let type_id = c.u32(|| format!("value type of {key:?}"))?;
        let ty = value_type(&key, type_id, type_offset)?;
        let value = read_value(&mut c, &key, ty, 0)?;
        metadata.push((key, value));
    }

    let alignment = match metadata.iter().find(|(k, _)| k == ALIGNMENT_KEY) {
        None => DEFAULT_ALIGNMENT,
        Some((_, v)) => {
            let a = int_as_i128(v).ok_or(GgufError::AlignmentType {
                found: v.value_type().name(),
            })?;
            match u64::try_from(a) {
                Ok(a) if a.is_power_of_two() => a,
                _ => return Err(GgufError::AlignmentNotPowerOfTwo { value: a }),
            }
        }
    };

    check_count_fits(&c, "tensors", n_tensors, MIN_TENSOR_INFO_BYTES)?;
    let mut raw = Vec::with_capacity(n_tensors as usize);
    let mut seen_names = HashSet::with_capacity(n_tensors as usize);
    for index in 0..n_tensors {
        let t = read_tensor_info(&mut c, index)?;
        if !seen_names.insert(t.name.clone()) {
            return Err(GgufError::DuplicateTensor { tensor: t.name });
        }
        raw.push(t);
    }

    let file_size = buf.len() as u64;
    let data_start = checked_align_up(c.offset(), alignment);
    let mut tensors = Vec::with_capacity(raw.len());
    for t in raw {
        tensors.push(place_tensor(t, data_start, alignment, file_size)?);
    }
    check_overlaps(&tensors)?;
    Ok(Header {
        version,
        alignment,
        metadata,
        tensors,
    })
}

fn check_count_fits(
    c: &Cursor<'_>,
    what: &'static str,
    count: u64,
    min_each: u64,
) -> Result<(), GgufError> {
    if count.saturating_mul(min_each) > c.remaining() {
        return Err(GgufError::CountExceedsFile {
            what,
            count,
            offset: c.offset(),
            remaining: c.remaining(),
            min_each,
        });
    }
    Ok(())
}

fn value_type(key: &str, type_id: u32, offset: u64) -> Result<ValueType, GgufError> {
    ValueType::from_u32(type_id).ok_or_else(|| GgufError::UnknownValueType {
        key: key.to_string(),
        type_id,
        offset,
    })
}

/// Fewest bytes one element of type `t` can take in an array.
fn min_encoded_size(t: ValueType) -> u64 {
    match t {
        ValueType::String => 8,
        ValueType::Array => 4 + 8,
        _ => t.fixed_size().unwrap_or(1) as u64,
    }
}

fn read_value(
    c: &mut Cursor<'_>,
    key: &str,
    ty: ValueType,
    depth: usize,
) -> Result<Value, GgufError> {
    let what = || format!("value of {key:?}");
    Ok(match ty {
        ValueType::U8 => Value::U8(c.array::<1>(what)?[0]),
        ValueType::I8 => Value::I8(i8::from_le_bytes(c.array(what)?)),
        ValueType::U16 => Value::U16(u16::from_le_bytes(c.array(what)?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(c.array(what)?)),
        ValueType::U32 => Value::U32(u32::from_le_bytes(c.array(what)?)),
        ValueType::I32 => Value::I32(i32::from_le_bytes(c.array(what)?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(c.array(what)?)),
        ValueType::U64 => Value::U64(u64::from_le_bytes(c.array(what)?)),
        ValueType::I64 => Value::I64(i64::from_le_bytes(c.array(what)?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(c.array(what)?)),
        ValueType::Bool => {
            let offset = c.offset();
            match c.array::<1>(what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                byte => {
                    return Err(GgufError::InvalidBool {
                        key: key.to_string(),
                        byte,
                        offset,
                    })
                }
            }
        }
        ValueType::String => Value::String(c.string(MAX_STRING_LEN, &what)?),
        ValueType::Array => {
            let offset = c.offset();
            if depth >= MAX_ARRAY_DEPTH {
                return Err(GgufError::ArrayTooDeep {
                    key: key.to_string(),
                    offset,
                    max: MAX_ARRAY_DEPTH,
                });
            }
            let elem_id = c.u32(|| format!("element type of {key:?}"))?;
            let elem = value_type(key, elem_id, offset)?;
            let len = c.u64(|| format!("length of {key:?}"))?;
            let max = MAX_ARRAY_LEN.min(c.remaining() / min_encoded_size(elem));
            if len > max {
                return Err(GgufError::ArrayTooLong {
                    key: key.to_string(),
                    offset,
                    len,
                    max,
                });
            }
            let mut items = Vec::with_capacity(len as usize);
            for _ in 0..len {
                items.push(read_value(c, key, elem, depth + 1)?);
            }
            Value::Array(elem, items)
        }
    })
}

/// A tensor info as read, before its data range is checked.
struct RawTensor {
    name: String,
    ty: GgmlType,
    dims: Vec<u64>,
    rel_offset: u64,
    n_bytes: u64,
}

fn read_tensor_info(c: &mut Cursor<'_>, index: u64) -> Result<RawTensor, GgufError> {
    // Read in full (bounded by the file) so that the error can name it.
    let name = c.string(u64::MAX, &|| format!("name of tensor {index}"))?;
    if name.len() as u64 > MAX_TENSOR_NAME_LEN {
        return Err(GgufError::TensorNameTooLong {
            len: name.len() as u64,
            tensor: name,
            max: MAX_TENSOR_NAME_LEN,
        });
    }
    let n_dims = c.u32(|| format!("dimension count of tensor {name:?}"))?;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(GgufError::BadDimCount {
            tensor: name,
            n_dims,
            max: MAX_DIMS,
        });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for i in 0..n_dims {
        let d = c.u64(|| format!("dimension {i} of tensor {name:?}"))?;
        dims.push(d);
    }
    if let Some(index) = dims.iter().position(|&d| d == 0) {
        return Err(GgufError::ZeroDim {
            tensor: name,
            index,
        });
    }
    let n_elements = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64);
    if n_elements.is_none() {
        return Err(GgufError::ElementCountOverflow { tensor: name, dims });
    }
    let type_id = c.u32(|| format!("type of tensor {name:?}"))?;
    let ty = match GgmlType::from_id(type_id) {
        Ok(t) => t,
        Err(ty) => return Err(GgufError::UnsupportedTensorType { tensor: name, ty }),
    };
    let block = ty.block_size() as u64;
    if !dims[0].is_multiple_of(block) {
        return Err(GgufError::PartialBlock {
            tensor: name,
            ty,
            ne0: dims[0],
            block,
        });
    }
    let rows: u64 = dims[1..].iter().product(); // ≤ n_elements, no overflow
    let n_bytes = match ty.row_bytes(dims[0]).and_then(|r| r.checked_mul(rows)) {
        Some(n) => n,
        None => return Err(GgufError::SizeOverflow { tensor: name, dims }),
    };
    let rel_offset = c.u64(|| format!("data offset of tensor {name:?}"))?;
    Ok(RawTensor {
        name,
        ty,
        dims,
        rel_offset,
        n_bytes,
    })
}

fn checked_align_up(x: u64, a: u64) -> Option<u64> {
    x.checked_next_multiple_of(a)
}

fn place_tensor(
    t: RawTensor,
    data_start: Option<u64>,
    alignment: u64,
    file_size: u64,
) -> Result<TensorInfo, GgufError> {
    if !t.rel_offset.is_multiple_of(alignment) {
        return Err(GgufError::MisalignedTensor {
            tensor: t.name,
            offset: t.rel_offset,
            alignment,
        });
    }
    let start = data_start.and_then(|s| s.checked_add(t.rel_offset));
    let end = start.and_then(|s| s.checked_add(t.n_bytes));
    let start = match (start, end) {
        (Some(s), Some(e)) if e <= file_size => s,
        _ => {
            return Err(GgufError::TensorPastEof {
                tensor: t.name,
                offset: start.unwrap_or(u64::MAX),
                end: end.map_or_else(|| "overflow".to_string(), |e| e.to_string()),
                file_size,
            })
        }
    };
    let needed = kernel_alignment(t.ty);
    if !start.is_multiple_of(needed) {
        return Err(GgufError::UnalignedForType {
            tensor: t.name,
            ty: t.ty,
            offset: start,
            needed,
        });
    }
    Ok(TensorInfo {
        name: t.name,
        ty: t.ty,
        dims: t.dims,
        offset: start,
        n_bytes: t.n_bytes,
    })
}

fn check_overlaps(tensors: &[TensorInfo]) -> Result<(), GgufError> {
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    order.sort_by_key(|t| (t.offset, t.n_bytes));
    for pair in order.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        // a.offset + a.n_bytes was checked against the file size.
        if b.offset < a.offset + a.n_bytes {
            return Err(GgufError::TensorsOverlap {
                first: a.name.clone(),
                second: b.name.clone(),
                offset: b.offset,
            });
        }
    }
    Ok(())
}
