//! Every way a GGUF file can be refused, and every way a metadata lookup can
//! fail. Each message names the key, tensor or byte offset involved, so that
//! one line on stderr is enough to find the problem.

use std::path::PathBuf;

use kernels::UnsupportedType;

#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The io error is part of the message rather than a `source`, so that
    /// printing the error chain does not repeat it.
    #[error("cannot read {}: {cause}", path.display())]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },

    #[error(
        "file is truncated: {what} at offset {offset} needs {need} bytes, but the file ends at {file_size}"
    )]
    Truncated {
        what: String,
        offset: u64,
        need: u64,
        file_size: u64,
    },

    #[error("not a GGUF file: magic is \"{}\", expected \"GGUF\"", found.escape_ascii())]
    BadMagic { found: [u8; 4] },

    #[error("GGUF version {version} is byte-swapped: the file is big-endian, clover reads little-endian files only")]
    BigEndian { version: u32 },

    #[error("GGUF version {version} is not supported (clover reads versions 2 and 3)")]
    UnsupportedVersion { version: u32 },

    #[error("header claims {count} tensors; the limit is {max}")]
    TooManyTensors { count: u64, max: u64 },

    #[error("header claims {count} metadata keys; the limit is {max}")]
    TooManyKeys { count: u64, max: u64 },

    #[error(
        "header claims {count} {what}, but only {remaining} bytes follow offset {offset} (each needs at least {min_each})"
    )]
    CountExceedsFile {
        what: &'static str,
        count: u64,
        offset: u64,
        remaining: u64,
        min_each: u64,
    },

    #[error("{what} at offset {offset} is {len} bytes long; the limit is {max}")]
    StringTooLong {
        what: String,
        offset: u64,
        len: u64,
        max: u64,
    },

    #[error("{what} at offset {offset} is not valid UTF-8")]
    InvalidUtf8 { what: String, offset: u64 },

    #[error("metadata key {index} at offset {offset} is empty")]
    EmptyKey { index: u64, offset: u64 },

    #[error("duplicate metadata key {key:?}")]
    DuplicateKey { key: String },

    #[error("metadata key {key:?}: unknown value type {type_id} at offset {offset}")]
    UnknownValueType {
        key: String,
        type_id: u32,
        offset: u64,
    },

    #[error("metadata key {key:?}: bool at offset {offset} is {byte}, not 0 or 1")]
    InvalidBool { key: String, byte: u8, offset: u64 },

    #[error(
        "metadata key {key:?}: array at offset {offset} claims {len} elements; the limit is {max}"
    )]
    ArrayTooLong {
        key: String,
        offset: u64,
        len: u64,
        max: u64,
    },

    #[error("metadata key {key:?}: arrays nested more than {max} deep (at offset {offset})")]
    ArrayTooDeep {
        key: String,
        offset: u64,
        max: usize,
    },

    #[error("general.alignment must be an integer, found {found}")]
    AlignmentType { found: &'static str },

    #[error("general.alignment is {value}, which is not a non-zero power of two")]
    AlignmentNotPowerOfTwo { value: i128 },

    #[error("tensor {tensor:?}: name is {len} bytes; ggml allows at most {max}")]
    TensorNameTooLong { tensor: String, len: u64, max: u64 },

    #[error("duplicate tensor name {tensor:?}")]
    DuplicateTensor { tensor: String },

    #[error("tensor {tensor:?}: {n_dims} dimensions; must be 1 to {max}")]
    BadDimCount {
        tensor: String,
        n_dims: u32,
        max: u32,
    },

    #[error("tensor {tensor:?}: dimension {index} is 0")]
    ZeroDim { tensor: String, index: usize },

    #[error("tensor {tensor:?}: shape {dims:?} has more elements than fit in an int64")]
    ElementCountOverflow { tensor: String, dims: Vec<u64> },

    #[error("tensor {tensor:?}: {ty}")]
    UnsupportedTensorType { tensor: String, ty: UnsupportedType },

    #[error(
        "tensor {tensor:?}: {ne0} elements per row is not a multiple of the {ty} block size {block}"
    )]
    PartialBlock {
        tensor: String,
        ty: kernels::GgmlType,
        ne0: u64,
        block: u64,
    },

    #[error("tensor {tensor:?}: data size of shape {dims:?} overflows")]
    SizeOverflow { tensor: String, dims: Vec<u64> },

    #[error(
        "tensor {tensor:?}: data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    MisalignedTensor {
        tensor: String,
        offset: u64,
        alignment: u64,
    },

    #[error(
        "tensor {tensor:?}: data at file offset {offset} is not {needed}-byte aligned, which the {ty} kernels need"
    )]
    UnalignedForType {
        tensor: String,
        ty: kernels::GgmlType,
        offset: u64,
        needed: u64,
    },

    #[error(
        "tensor {tensor:?}: data {offset}..{end} lies past the end of the file ({file_size} bytes)"
    )]
    TensorPastEof {
        tensor: String,
        offset: u64,
        end: String,
        file_size: u64,
    },

    #[error("tensors {first:?} and {second:?} overlap: {second:?} starts at offset {offset}, inside {first:?}")]
    TensorsOverlap {
        first: String,
        second: String,
        offset: u64,
    },

    #[error("metadata key {key:?} is missing")]
    MissingKey { key: String },

    #[error("metadata key {key:?} is {found}, expected {expected}")]
    WrongType {
        key: String,
        expected: &'static str,
        found: String,
    },

    #[error("metadata key {key:?} is {value}, which does not fit in {target}")]
    OutOfRange {
        key: String,
        value: String,
        target: &'static str,
    },

    #[error("metadata key {key:?}: element {index} is {found}, expected {expected}")]
    WrongElement {
        key: String,
        index: usize,
        expected: &'static str,
        found: String,
    },
}
