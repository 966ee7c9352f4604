//! The GGUF reader against hostile input (one `rejects_*` test per check), the
//! writer/reader round trip, and a deterministic mutation fuzz.

use clover::gguf::reader::{MAX_ARRAY_DEPTH, MAX_ARRAY_LEN, MAX_KEYS, MAX_TENSORS};
use clover::gguf::{GgufError, GgufFile, GgufWriter, TensorPlan, Value, ValueType};
use kernels::GgmlType;

// ---------------------------------------------------------------- helpers

/// Hand-built GGUF bytes, for files the writer refuses to produce.
#[derive(Clone, Default)]
struct Raw(Vec<u8>);

impl Raw {
    fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// A key with a u32 value.
    fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key).u32(ValueType::U32 as u32).u32(v)
    }
    fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    fn pad_to(&mut self, a: usize) -> &mut Self {
        while !self.0.len().is_multiple_of(a) {
            self.0.push(0);
        }
        self
    }
    fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    fn done(&self) -> Vec<u8> {
        self.0.clone()
    }
}

/// Writes a file with the writer into memory, filling tensor `i` with bytes
/// `(i * 31 + j) % 251`.
fn write(w: &GgufWriter) -> Vec<u8> {
    let mut out = Vec::new();
    w.write(&mut out, |i, plan, o| {
        o.write_all(&pattern(i, plan.n_bytes()? as usize))
    })
    .unwrap();
    out
}

fn pattern(i: usize, n: usize) -> Vec<u8> {
    (0..n).map(|j| ((i * 31 + j) % 251) as u8).collect()
}

fn parse(bytes: Vec<u8>) -> GgufFile {
    match GgufFile::from_bytes(bytes) {
        Ok(f) => f,
        Err(e) => panic!("valid file rejected: {e}"),
    }
}

/// Parses bytes that must be rejected; the message must be one line.
fn reject(bytes: Vec<u8>) -> GgufError {
    match GgufFile::from_bytes(bytes) {
        Ok(f) => panic!("accepted a bad file: {f:?}"),
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "multi-line message: {msg}");
            e
        }
    }
}

/// A small valid model-like file.
fn sample_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::str("clover_moe"));
    w.set("clover_moe.block_count", Value::U32(4));
    w.set(
        "tokenizer.ggml.tokens",
        Value::strings(["a", "b", "<|mask|>"]),
    );
    w.add_tensor("token_embd.weight", GgmlType::F32, &[8, 3]);
    w.add_tensor("blk.0.ffn_up.weight", GgmlType::Q4_K, &[256, 2]);
    w.add_tensor("blk.0.attn_q.weight", GgmlType::Q8_0, &[64, 3, 1, 2]);
    w.add_tensor("output_norm.weight", GgmlType::F16, &[8]);
    w
}

/// One key `k` of the given raw type and value bytes, no tensors.
fn one_key(type_id: u32, value: &[u8]) -> Vec<u8> {
    Raw::header(3, 0, 1)
        .str("k")
        .u32(type_id)
        .bytes(value)
        .done()
}

/// A file with one F32 tensor `t` of `dims` at relative `offset`, followed by
/// `data` bytes of data section.
fn one_tensor(dims: &[u64], ty: u32, offset: u64, data: usize) -> Vec<u8> {
    Raw::header(3, 1, 0)
        .tensor("t", dims, ty, offset)
        .pad_to(32)
        .zeros(data)
        .done()
}

// ------------------------------------------------------------ header checks

#[test]
fn rejects_empty_file() {
    assert!(matches!(reject(vec![]), GgufError::Truncated { .. }));
}

#[test]
fn rejects_bad_magic() {
    let mut b = write(&sample_writer());
    b[0..4].copy_from_slice(b"GGML");
    let e = reject(b);
    assert!(matches!(e, GgufError::BadMagic { found } if &found == b"GGML"));
}

#[test]
fn rejects_unsupported_version() {
    for v in [0, 1, 4, 99] {
        let e = reject(Raw::header(v, 0, 0).done());
        assert!(
            matches!(e, GgufError::UnsupportedVersion { version } if version == v),
            "{e}"
        );
    }
}

#[test]
fn accepts_version_2() {
    let b = Raw::header(2, 0, 1).kv_u32("x", 7).done();
    let f = parse(b);
    assert_eq!(f.version(), 2);
    assert_eq!(f.get_u32("x").unwrap(), 7);
}

#[test]
fn rejects_big_endian_file() {
    let e = reject(Raw::header(3u32.swap_bytes(), 0, 0).done());
    assert!(matches!(e, GgufError::BigEndian { .. }), "{e}");
}

#[test]
fn rejects_truncated_header() {
    let full = Raw::header(3, 0, 0).done();
    for n in 0..full.len() {
        let e = reject(full[..n].to_vec());
        assert!(matches!(e, GgufError::Truncated { .. }), "{n}: {e}");
    }
    parse(full);
}

#[test]
fn rejects_header_claiming_2_pow_63_tensors_without_allocating() {
    let e = reject(Raw::header(3, 1 << 63, 0).done());
    assert!(
        matches!(e, GgufError::TooManyTensors { count, .. } if count == 1 << 63),
        "{e}"
    );
    assert!(e.to_string().contains("9223372036854775808"));
}

#[test]
fn rejects_tensor_count_over_cap() {
    let e = reject(Raw::header(3, MAX_TENSORS + 1, 0).done());
    assert!(matches!(e, GgufError::TooManyTensors { .. }), "{e}");
}

#[test]
fn rejects_tensor_count_the_file_cannot_hold() {
    // 1000 tensors need at least 32 000 bytes of infos.
    let e = reject(Raw::header(3, 1000, 0).zeros(1000).done());
    assert!(
        matches!(
            e,
            GgufError::CountExceedsFile {
                what: "tensors",
                count: 1000,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn rejects_key_count_over_cap() {
    let e = reject(Raw::header(3, 0, MAX_KEYS + 1).done());
    assert!(matches!(e, GgufError::TooManyKeys { .. }), "{e}");
    let e = reject(Raw::header(3, 0, u64::MAX).done());
    assert!(matches!(e, GgufError::TooManyKeys { .. }), "{e}");
}

#[test]
fn rejects_key_count_the_file_cannot_hold() {
    let e = reject(Raw::header(3, 0, 100).kv_u32("a", 1).done());
    assert!(
        matches!(
            e,
            GgufError::CountExceedsFile {
                what: "metadata keys",
                ..
            }
        ),
        "{e}"
    );
}

// ---------------------------------------------------------- metadata checks

#[test]
fn rejects_string_longer_than_cap() {
    // Key length u64::MAX.
    let e = reject(Raw::header(3, 0, 1).u64(u64::MAX).zeros(20).done());
    assert!(matches!(e, GgufError::StringTooLong { .. }), "{e}");
    assert!(e.to_string().contains("metadata key 0"), "{e}");
    // A string value claiming 2^40 bytes.
    let mut v = Raw::default();
    v.u64(1 << 40).zeros(16);
    let e = reject(one_key(ValueType::String as u32, &v.0));
    assert!(matches!(e, GgufError::StringTooLong { .. }), "{e}");
    assert!(e.to_string().contains("\"k\""), "{e}");
}

#[test]
fn rejects_string_running_past_eof() {
    let mut v = Raw::default();
    v.u64(100).bytes(b"short");
    let e = reject(one_key(ValueType::String as u32, &v.0));
    assert!(matches!(e, GgufError::Truncated { need: 100, .. }), "{e}");
}

#[test]
fn rejects_invalid_utf8_key() {
    let b = Raw::header(3, 0, 1)
        .u64(2)
        .bytes(&[0xc3, 0x28])
        .u32(ValueType::U8 as u32)
        .u8(0)
        .done();
    let e = reject(b);
    assert!(
        matches!(e, GgufError::InvalidUtf8 { offset: 32, .. }),
        "{e}"
    );
}

#[test]
fn rejects_invalid_utf8_value() {
    let mut v = Raw::default();
    v.u64(3).bytes(&[b'a', 0xff, b'b']);
    let e = reject(one_key(ValueType::String as u32, &v.0));
    assert!(matches!(e, GgufError::InvalidUtf8 { .. }), "{e}");
    assert!(e.to_string().contains("\"k\""), "{e}");
}

#[test]
fn rejects_empty_key() {
    let b = Raw::header(3, 0, 1).str("").u32(0).u8(1).zeros(4).done();
    assert!(matches!(reject(b), GgufError::EmptyKey { index: 0, .. }));
}

#[test]
fn rejects_duplicate_key() {
    let b = Raw::header(3, 0, 2)
        .kv_u32("a.b", 1)
        .kv_u32("a.b", 2)
        .done();
    let e = reject(b);
    assert!(
        matches!(e, GgufError::DuplicateKey { ref key } if key == "a.b"),
        "{e}"
    );
}

#[test]
fn rejects_unknown_value_type() {
    let e = reject(one_key(13, &[0; 8]));
    assert!(
        matches!(e, GgufError::UnknownValueType { type_id: 13, ref key, .. } if key == "k"),
        "{e}"
    );
}

#[test]
fn rejects_unknown_array_element_type() {
    let mut v = Raw::default();
    v.u32(77).u64(1).zeros(8);
    let e = reject(one_key(ValueType::Array as u32, &v.0));
    assert!(
        matches!(e, GgufError::UnknownValueType { type_id: 77, .. }),
        "{e}"
    );
}

#[test]
fn rejects_bool_that_is_not_0_or_1() {
    let e = reject(one_key(ValueType::Bool as u32, &[2]));
    assert!(matches!(e, GgufError::InvalidBool { byte: 2, .. }), "{e}");
}

#[test]
fn rejects_array_longer_than_the_file_allows() {
    // 10 u32 claimed, 8 bytes present.
    let mut v = Raw::default();
    v.u32(ValueType::U32 as u32).u64(10).zeros(8);
    let e = reject(one_key(ValueType::Array as u32, &v.0));
    assert!(
        matches!(
            e,
            GgufError::ArrayTooLong {
                len: 10,
                max: 2,
                ..
            }
        ),
        "{e}"
    );
    // 2^62 strings: refused before any allocation.
    let mut v = Raw::default();
    v.u32(ValueType::String as u32).u64(1 << 62);
    let e = reject(one_key(ValueType::Array as u32, &v.0));
    assert!(matches!(e, GgufError::ArrayTooLong { .. }), "{e}");
}

#[test]
fn rejects_array_longer_than_cap() {
    let n = MAX_ARRAY_LEN + 1;
    let mut v = Raw::default();
    v.u32(ValueType::U8 as u32).u64(n).zeros(n as usize);
    let e = reject(one_key(ValueType::Array as u32, &v.0));
    assert!(
        matches!(e, GgufError::ArrayTooLong { len, max, .. } if len == n && max == MAX_ARRAY_LEN),
        "{e}"
    );
}

#[test]
fn rejects_arrays_nested_too_deep() {
    let nest = |levels: usize| {
        let mut v = Raw::default();
        for _ in 0..levels - 1 {
            v.u32(ValueType::Array as u32).u64(1);
        }
        v.u32(ValueType::U8 as u32).u64(0);
        one_key(ValueType::Array as u32, &v.0)
    };
    let f = parse(nest(MAX_ARRAY_DEPTH));
    assert!(f.get("k").is_some());
    let e = reject(nest(MAX_ARRAY_DEPTH + 1));
    assert!(matches!(e, GgufError::ArrayTooDeep { .. }), "{e}");
}

#[test]
fn rejects_alignment_of_non_integer_type() {
    let b = Raw::header(3, 0, 1)
        .str("general.alignment")
        .u32(ValueType::F32 as u32)
        .bytes(&32f32.to_le_bytes())
        .done();
    let e = reject(b);
    assert!(
        matches!(e, GgufError::AlignmentType { found: "f32" }),
        "{e}"
    );
}

#[test]
fn rejects_alignment_that_is_zero_or_not_a_power_of_two() {
    for a in [0u32, 3, 48, 100] {
        let e = reject(Raw::header(3, 0, 1).kv_u32("general.alignment", a).done());
        assert!(
            matches!(e, GgufError::AlignmentNotPowerOfTwo { value } if value == a as i128),
            "{a}: {e}"
        );
    }
    let b = Raw::header(3, 0, 1)
        .str("general.alignment")
        .u32(ValueType::I64 as u32)
        .u64((-32i64) as u64)
        .done();
    assert!(matches!(
        reject(b),
        GgufError::AlignmentNotPowerOfTwo { value: -32 }
    ));
}

#[test]
fn accepts_alignment_of_any_integer_width() {
    let b = Raw::header(3, 0, 1)
        .str("general.alignment")
        .u32(ValueType::U16 as u32)
        .bytes(&64u16.to_le_bytes())
        .done();
    assert_eq!(parse(b).alignment(), 64);
}

// ------------------------------------------------------------ tensor checks

#[test]
fn rejects_tensor_name_longer_than_ggml_allows() {
    let name = "x".repeat(64);
    let b = Raw::header(3, 1, 0)
        .tensor(&name, &[4], 0, 0)
        .pad_to(32)
        .zeros(16)
        .done();
    let e = reject(b);
    assert!(
        matches!(e, GgufError::TensorNameTooLong { len: 64, .. }),
        "{e}"
    );
}

#[test]
fn rejects_duplicate_tensor_name() {
    let b = Raw::header(3, 2, 0)
        .tensor("w", &[4], 0, 0)
        .tensor("w", &[4], 0, 32)
        .pad_to(32)
        .zeros(48)
        .done();
    let e = reject(b);
    assert!(
        matches!(e, GgufError::DuplicateTensor { ref tensor } if tensor == "w"),
        "{e}"
    );
}

#[test]
fn rejects_zero_or_more_than_four_dimensions() {
    for n in [0usize, 5, 1000] {
        let dims = vec![1u64; n.min(5)];
        let mut r = Raw::header(3, 1, 0);
        r.str("t").u32(n as u32);
        for d in &dims {
            r.u64(*d);
        }
        r.u32(0).u64(0).pad_to(32).zeros(64);
        let e = reject(r.done());
        assert!(
            matches!(e, GgufError::BadDimCount { n_dims, .. } if n_dims as usize == n),
            "{n}: {e}"
        );
    }
}

#[test]
fn rejects_zero_dimension() {
    let e = reject(one_tensor(&[4, 0], 0, 0, 16));
    assert!(matches!(e, GgufError::ZeroDim { index: 1, .. }), "{e}");
}

#[test]
fn rejects_element_count_overflow() {
    let e = reject(one_tensor(&[1 << 32, 1 << 32], 0, 0, 16));
    assert!(matches!(e, GgufError::ElementCountOverflow { .. }), "{e}");
    // Fits in u64 but not in ggml's int64.
    let e = reject(one_tensor(&[1 << 32, 1 << 31], 0, 0, 16));
    assert!(matches!(e, GgufError::ElementCountOverflow { .. }), "{e}");
}

#[test]
fn rejects_byte_size_overflow() {
    // 2^62 F32 elements fit in an int64, their 2^64 bytes do not fit in a u64.
    let e = reject(one_tensor(&[1 << 62], 0, 0, 16));
    assert!(matches!(e, GgufError::SizeOverflow { .. }), "{e}");
}

#[test]
fn rejects_unsupported_tensor_type_naming_tensor_and_ggml_type() {
    // 16 is ggml's IQ2_XXS, which clover does not implement.
    let e = reject(one_tensor(&[256], 16, 0, 256));
    assert!(matches!(e, GgufError::UnsupportedTensorType { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("\"t\"") && msg.contains("IQ2_XXS"), "{msg}");
    // An id ggml does not know either.
    let e = reject(one_tensor(&[256], 9999, 0, 256));
    assert!(e.to_string().contains("9999"), "{e}");
}

#[test]
fn rejects_row_that_is_not_a_whole_number_of_blocks() {
    let e = reject(one_tensor(&[100, 2], GgmlType::Q4_K.id(), 0, 1000));
    assert!(
        matches!(
            e,
            GgufError::PartialBlock {
                ne0: 100,
                block: 256,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn rejects_misaligned_tensor_offset() {
    let e = reject(one_tensor(&[4], 0, 4, 64));
    assert!(
        matches!(
            e,
            GgufError::MisalignedTensor {
                offset: 4,
                alignment: 32,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn rejects_tensor_offset_past_eof() {
    let e = reject(one_tensor(&[4], 0, 1 << 20, 64));
    assert!(matches!(e, GgufError::TensorPastEof { .. }), "{e}");
}

#[test]
fn rejects_tensor_data_running_past_eof() {
    // 16 bytes of data needed, 15 present.
    let e = reject(one_tensor(&[4], 0, 0, 15));
    assert!(matches!(e, GgufError::TensorPastEof { .. }), "{e}");
    parse(one_tensor(&[4], 0, 0, 16));
}

#[test]
fn rejects_tensor_offset_that_overflows() {
    let off = u64::MAX - 31; // aligned to 32
    let e = reject(one_tensor(&[4], 0, off, 64));
    assert!(matches!(e, GgufError::TensorPastEof { .. }), "{e}");
    assert!(e.to_string().contains("overflow"), "{e}");
}

#[test]
fn rejects_overlapping_tensors() {
    let b = Raw::header(3, 2, 0)
        .tensor("a", &[16], 0, 0) // 64 bytes at 0..64
        .tensor("b", &[8], 0, 32) // 32 bytes at 32..64
        .pad_to(32)
        .zeros(64)
        .done();
    let e = reject(b);
    assert!(matches!(e, GgufError::TensorsOverlap { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("\"a\"") && msg.contains("\"b\""), "{msg}");
}

#[test]
fn rejects_f32_tensor_the_kernels_cannot_read_in_place() {
    // Alignment 1 lets the data start at an odd offset.
    let mut r = Raw::header(3, 1, 1);
    r.kv_u32("general.alignment", 1).tensor("t", &[4], 0, 1);
    r.zeros(20);
    let e = reject(r.done());
    assert!(
        matches!(e, GgufError::UnalignedForType { needed: 4, .. }),
        "{e}"
    );
}

#[test]
fn rejects_every_truncation_of_a_valid_file() {
    let full = write(&sample_writer());
    parse(full.clone());
    for n in 0..full.len() {
        let r = GgufFile::from_bytes(full[..n].to_vec());
        assert!(r.is_err(), "prefix of {n} of {} bytes accepted", full.len());
    }
}

// ------------------------------------------------------------- round trips

fn every_value() -> Vec<(String, Value)> {
    let vals = vec![
        Value::U8(200),
        Value::I8(-100),
        Value::U16(60_000),
        Value::I16(-30_000),
        Value::U32(4_000_000_000),
        Value::I32(-2_000_000_000),
        Value::F32(-0.0),
        Value::F32(f32::INFINITY),
        Value::F32(1e-6),
        Value::Bool(true),
        Value::Bool(false),
        Value::str(""),
        Value::str("héllo, 世界 <|mask|>"),
        Value::U64(u64::MAX),
        Value::I64(i64::MIN),
        Value::F64(std::f64::consts::PI),
        Value::u32s([1, 2, 3]),
        Value::i32s([11, 11, 10, 0]),
        Value::f32s([0.5, -2.0]),
        Value::strings(["a", "", "ccc"]),
        Value::Array(ValueType::U8, vec![]),
        Value::Array(ValueType::String, vec![]),
        Value::Array(ValueType::Array, vec![]),
        Value::Array(ValueType::Bool, vec![Value::Bool(true), Value::Bool(false)]),
        Value::Array(ValueType::U64, vec![Value::U64(0), Value::U64(u64::MAX)]),
        Value::Array(ValueType::I8, vec![Value::I8(-1)]),
        Value::Array(ValueType::F64, vec![Value::F64(1.0 / 3.0)]),
        Value::Array(
            ValueType::Array,
            vec![
                Value::u32s([1]),
                Value::Array(ValueType::U32, vec![]),
                Value::u32s([2, 3]),
            ],
        ),
        Value::Array(
            ValueType::Array,
            vec![Value::Array(
                ValueType::Array,
                vec![
                    Value::strings(["deep"]),
                    Value::Array(ValueType::I16, vec![]),
                ],
            )],
        ),
    ];
    vals.into_iter()
        .enumerate()
        .map(|(i, v)| (format!("test.v{i}.{}", v.value_type().name()), v))
        .collect()
}

#[test]
fn round_trips_every_value_type_including_nested_and_empty_arrays() {
    let mut w = GgufWriter::new();
    let values = every_value();
    for (k, v) in &values {
        w.set(k.clone(), v.clone());
    }
    let f = parse(write(&w));
    assert_eq!(f.version(), 3);
    assert_eq!(f.metadata(), &values[..]);
    for (k, v) in &values {
        assert_eq!(f.get(k), Some(v));
    }
    // -0.0 == 0.0 under PartialEq: check the sign bit survived.
    let neg_zero = values.iter().find(|(_, v)| *v == Value::F32(-0.0)).unwrap();
    assert!(f.get_f32(&neg_zero.0).unwrap().is_sign_negative());
    assert!(f.tensors().is_empty());
}

#[test]
fn round_trips_tensor_infos_and_data_views() {
    let w = sample_writer();
    let bytes = write(&w);
    let f = parse(bytes.clone());
    assert_eq!(f.file_size(), bytes.len() as u64);
    assert_eq!(f.bytes(), &bytes[..]);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.tensors().len(), w.tensors().len());
    for (i, (info, plan)) in f.tensors().iter().zip(w.tensors()).enumerate() {
        let TensorPlan { name, ty, dims } = plan;
        assert_eq!((&info.name, info.ty, &info.dims), (name, *ty, dims));
        assert_eq!(info.n_bytes, plan.n_bytes().unwrap());
        assert_eq!(info.n_elements(), plan.n_elements());
        assert_eq!(info.offset % 32, 0);
        let view = f.tensor(name).unwrap();
        assert_eq!(
            (view.name, view.ty, view.dims),
            (name.as_str(), *ty, &dims[..])
        );
        assert_eq!(view.data, &pattern(i, info.n_bytes as usize)[..]);
        assert_eq!(
            &bytes[info.offset as usize..(info.offset + info.n_bytes) as usize],
            view.data
        );
    }
    // Sizes that do not come from the writer: Q4_K 256x2 is 2 blocks of 144.
    assert_eq!(f.tensor_info("blk.0.ffn_up.weight").unwrap().n_bytes, 288);
    // Q8_0 64x3x1x2: 6 rows of 2 blocks of 34.
    assert_eq!(f.tensor_info("blk.0.attn_q.weight").unwrap().n_bytes, 408);
    assert_eq!(
        f.tensor_info("blk.0.attn_q.weight").unwrap().n_elements(),
        384
    );
    assert!(f.tensor("missing").is_none());
    assert!(f.tensor_info("missing").is_none());
}

#[test]
fn honours_alignment_override_of_64() {
    let mut w = sample_writer();
    w.set("general.alignment", Value::U32(64));
    let bytes = write(&w);
    let f = parse(bytes);
    assert_eq!(f.alignment(), 64);
    let first = f.tensors()[0].offset;
    assert_eq!(first % 64, 0);
    for (i, t) in f.tensors().iter().enumerate() {
        assert_eq!(t.offset % 64, 0, "{}", t.name);
        assert_eq!(f.view(t).data, &pattern(i, t.n_bytes as usize)[..]);
    }
    // The second tensor starts at the next multiple of 64 after the first.
    let t = f.tensors();
    assert_eq!(
        t[1].offset,
        (t[0].offset + t[0].n_bytes).next_multiple_of(64)
    );
}

#[test]
fn opens_a_file_from_disk_by_mmap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let w = sample_writer();
    let n = w
        .write_to_path(&path, |i, p, o| {
            o.write_all(&pattern(i, p.n_bytes()? as usize))
        })
        .unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.file_size(), n);
    assert_eq!(f.bytes(), &std::fs::read(&path).unwrap()[..]);
    assert_eq!(f.get_str("general.architecture").unwrap(), "clover_moe");
    let e = GgufFile::open(&dir.path().join("nope.gguf")).unwrap_err();
    assert!(matches!(e, GgufError::Io { .. }));
    assert!(e.to_string().contains("nope.gguf"), "{e}");
    let e = GgufFile::open(dir.path()).unwrap_err();
    assert!(matches!(e, GgufError::Io { .. }), "{e}");
}

/// A file written by gguf-py (llama.cpp's Python writer), generated by
/// tests/fixtures/make_gguf_py_fixture.py; expected values are its constants.
#[test]
fn reads_a_file_written_by_gguf_py() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_py_small.bin");
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.get_str("general.architecture").unwrap(), "clover_moe");
    assert_eq!(f.get_u32("clover_moe.block_count").unwrap(), 41);
    assert_eq!(f.get("t.u8"), Some(&Value::U8(250)));
    assert_eq!(f.get("t.i8"), Some(&Value::I8(-7)));
    assert_eq!(f.get("t.u16"), Some(&Value::U16(65535)));
    assert_eq!(f.get("t.i16"), Some(&Value::I16(-300)));
    assert_eq!(f.get("t.i32"), Some(&Value::I32(-123456)));
    assert_eq!(f.get("t.f32"), Some(&Value::F32(0.125)));
    assert_eq!(f.get("t.bool"), Some(&Value::Bool(true)));
    assert_eq!(f.get_str("t.str").unwrap(), "héllo");
    assert_eq!(f.get("t.u64"), Some(&Value::U64((1 << 40) + 3)));
    assert_eq!(f.get("t.i64"), Some(&Value::I64(-(1 << 40))));
    assert_eq!(f.get("t.f64"), Some(&Value::F64(2.5)));
    assert_eq!(f.get_i32_array("t.i32s").unwrap(), vec![11, 11, 10, 0]);
    assert_eq!(f.get_str_array("t.strs").unwrap(), vec!["a", "bb", ""]);
    let nested = f.get_array("t.nested").unwrap();
    assert_eq!(nested.len(), 2);
    assert_eq!(
        nested[0].as_array().unwrap(),
        &[Value::I32(1), Value::I32(2)]
    );
    assert_eq!(nested[1].as_array().unwrap(), &[Value::I32(3)]);

    let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    // numpy shape (2, 3) is ggml ne [3, 2].
    let a = f.tensor("a").unwrap();
    assert_eq!((a.ty, a.dims), (GgmlType::F32, &[3u64, 2][..]));
    let a_vals: Vec<f32> = a
        .data
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(a_vals, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let b = f.tensor("b").unwrap();
    assert_eq!((b.ty, b.dims), (GgmlType::F16, &[8u64][..]));
    let b_vals: Vec<f32> = b
        .data
        .chunks_exact(2)
        .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect();
    assert_eq!(b_vals, (0..8).map(|i| i as f32 / 4.0).collect::<Vec<_>>());
    let c = f.tensor("c").unwrap();
    assert_eq!((c.ty, c.dims), (GgmlType::Q8_0, &[32u64, 1][..]));
    assert_eq!(c.data, (0..34).collect::<Vec<u8>>());
}

// ----------------------------------------------------------------- writer

#[test]
fn writer_records_an_alignment_set_only_through_the_field() {
    let mut w = sample_writer();
    w.alignment = 128;
    let f = parse(write(&w));
    assert_eq!(f.alignment(), 128);
    assert_eq!(f.get("general.alignment"), Some(&Value::U32(128)));
    assert!(f.tensors().iter().all(|t| t.offset % 128 == 0));
}

#[test]
fn writer_refuses_files_the_reader_would_refuse() {
    let refuse = |w: &GgufWriter| {
        let mut out = Vec::new();
        let r = w.write(&mut out, |_, p, o| {
            o.write_all(&vec![0; p.n_bytes()? as usize])
        });
        assert!(r.is_err(), "wrote {} bytes", out.len());
        r.unwrap_err().to_string()
    };
    // llama.cpp reads general.alignment as a u32 only.
    let mut w = GgufWriter::new();
    w.set("general.alignment", Value::U64(64));
    assert!(refuse(&w).contains("u32"));
    let mut w = GgufWriter::new();
    w.alignment = 48;
    refuse(&w);
    let mut w = GgufWriter::new();
    w.set("", Value::U8(0));
    refuse(&w);
    for dims in [&[][..], &[0][..], &[1, 1, 1, 1, 1][..]] {
        let mut w = GgufWriter::new();
        w.add_tensor("t", GgmlType::F32, dims);
        refuse(&w);
    }
    let mut w = GgufWriter::new();
    w.add_tensor("t", GgmlType::F32, &[1]);
    w.add_tensor("t", GgmlType::F32, &[1]);
    refuse(&w);
    let mut w = GgufWriter::new();
    w.add_tensor("x".repeat(64), GgmlType::F32, &[1]);
    refuse(&w);
    let mut w = GgufWriter::new();
    w.add_tensor("t", GgmlType::F32, &[1 << 40, 1 << 40]);
    assert!(refuse(&w).contains("t"));
}

// ---------------------------------------------------------------- getters

fn getters_file() -> GgufFile {
    let mut w = GgufWriter::new();
    w.set("u8", Value::U8(7));
    w.set("i64.small", Value::I64(123));
    w.set("i64.neg", Value::I64(-1));
    w.set("u64.big", Value::U64(1 << 40));
    w.set("u64.max", Value::U64(u64::MAX));
    w.set("f32", Value::F32(1.5));
    w.set("f64", Value::F64(0.25));
    w.set("bool", Value::Bool(true));
    w.set("str", Value::str("gpt2"));
    w.set("strs", Value::strings(["x", "y"]));
    w.set("i32s", Value::i32s([-1, 5]));
    w.set(
        "u8s",
        Value::Array(ValueType::U8, vec![Value::U8(1), Value::U8(2)]),
    );
    w.set(
        "u64s.big",
        Value::Array(ValueType::U64, vec![Value::U64(1 << 33)]),
    );
    w.set(
        "nested",
        Value::Array(ValueType::Array, vec![Value::u32s([1])]),
    );
    parse(write(&w))
}

#[test]
fn integer_getters_accept_any_width_that_fits() {
    let f = getters_file();
    assert_eq!(f.get_u32("u8").unwrap(), 7);
    assert_eq!(f.get_u32("i64.small").unwrap(), 123);
    assert_eq!(f.get_u64("u64.big").unwrap(), 1 << 40);
    assert_eq!(f.get_i64("i64.neg").unwrap(), -1);
    assert_eq!(f.get_i64("u8").unwrap(), 7);
    assert_eq!(f.get_u64("u64.max").unwrap(), u64::MAX);
}

#[test]
fn integer_getters_name_the_key_when_out_of_range() {
    let f = getters_file();
    for (key, e) in [
        ("u64.big", f.get_u32("u64.big").unwrap_err()),
        ("i64.neg", f.get_u32("i64.neg").unwrap_err()),
        ("i64.neg", f.get_u64("i64.neg").unwrap_err()),
        ("u64.max", f.get_i64("u64.max").unwrap_err()),
    ] {
        assert!(matches!(e, GgufError::OutOfRange { .. }), "{e}");
        assert!(e.to_string().contains(&format!("{key:?}")), "{e}");
    }
}

#[test]
fn getters_name_the_key_when_missing_or_of_the_wrong_type() {
    let f = getters_file();
    let e = f.get_u32("nope").unwrap_err();
    assert!(
        matches!(e, GgufError::MissingKey { ref key } if key == "nope"),
        "{e}"
    );
    assert!(e.to_string().contains("\"nope\""));
    let wrong = [
        f.get_u32("str").unwrap_err(),
        f.get_f32("u8").unwrap_err(),
        f.get_bool("u8").unwrap_err(),
        f.get_str("u8").unwrap_err(),
        f.get_array("str").unwrap_err(),
    ];
    for e in wrong {
        assert!(matches!(e, GgufError::WrongType { .. }), "{e}");
    }
    assert!(f.get_str("u8").unwrap_err().to_string().contains("\"u8\""));
}

#[test]
fn float_bool_and_string_getters_read_their_types() {
    let f = getters_file();
    assert_eq!(f.get_f32("f32").unwrap(), 1.5);
    assert_eq!(f.get_f32("f64").unwrap(), 0.25);
    assert!(f.get_bool("bool").unwrap());
    assert_eq!(f.get_str("str").unwrap(), "gpt2");
    assert_eq!(f.get_array("strs").unwrap().len(), 2);
}

#[test]
fn array_getters_convert_elements_and_name_the_bad_one() {
    let f = getters_file();
    assert_eq!(f.get_str_array("strs").unwrap(), vec!["x", "y"]);
    assert_eq!(f.get_i32_array("i32s").unwrap(), vec![-1, 5]);
    assert_eq!(f.get_u32_array("u8s").unwrap(), vec![1, 2]);
    assert_eq!(f.get_i32_array("u8s").unwrap(), vec![1, 2]);
    let e = f.get_u32_array("i32s").unwrap_err();
    assert!(matches!(e, GgufError::WrongElement { index: 0, .. }), "{e}");
    assert!(e.to_string().contains("\"i32s\""), "{e}");
    let e = f.get_i32_array("u64s.big").unwrap_err();
    assert!(matches!(e, GgufError::WrongElement { index: 0, .. }), "{e}");
    let e = f.get_str_array("i32s").unwrap_err();
    assert!(matches!(e, GgufError::WrongElement { .. }), "{e}");
    let e = f.get_u32_array("nested").unwrap_err();
    assert!(matches!(e, GgufError::WrongElement { .. }), "{e}");
    assert!(matches!(
        f.get_str_array("str").unwrap_err(),
        GgufError::WrongType { .. }
    ));
}

// ------------------------------------------------------- mutation fuzzing

/// xorshift64*: a fixed, dependency-free generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn mutate(rng: &mut Rng, base: &[u8]) -> Vec<u8> {
    let mut b = base.to_vec();
    let interesting: [u64; 9] = [
        0,
        1,
        4,
        63,
        64,
        1 << 32,
        1 << 63,
        u64::MAX,
        base.len() as u64,
    ];
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 => {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(b.len());
                b[i] = rng.next() as u8;
            }
            2 => {
                let n = rng.below(b.len() + 1);
                b.truncate(n);
            }
            3 => {
                // An interesting u64 or u32 at any position (counts, lengths,
                // offsets, dims and type ids all live there).
                let v = interesting[rng.below(interesting.len())];
                let width = if rng.below(2) == 0 { 8 } else { 4 };
                if b.len() >= width {
                    let i = rng.below(b.len() - width + 1);
                    b[i..i + width].copy_from_slice(&v.to_le_bytes()[..width]);
                }
            }
            4 => {
                let i = rng.below(b.len() + 1);
                let n = rng.below(16);
                let junk: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
                b.splice(i..i, junk);
            }
            _ => {
                if b.len() > 1 {
                    let i = rng.below(b.len());
                    let n = rng.below(b.len() - i).min(32);
                    b.drain(i..i + n);
                }
            }
        }
        if b.is_empty() {
            break;
        }
    }
    b
}

/// What any accepted file must satisfy.
fn check_consistent(f: &GgufFile) {
    assert!(f.alignment().is_power_of_two());
    for (k, _) in f.metadata() {
        assert!(f.get(k).is_some());
        let _ = (f.get_u32(k), f.get_i64(k), f.get_f32(k), f.get_str(k));
        let _ = (f.get_u32_array(k), f.get_i32_array(k), f.get_str_array(k));
    }
    for t in f.tensors() {
        let v = f.view(t);
        assert_eq!(v.data.len() as u64, t.n_bytes);
        assert!(t.offset + t.n_bytes <= f.file_size());
        assert_eq!(t.offset % f.alignment(), 0);
        assert!(t.dims.len() <= 4 && t.dims.iter().all(|&d| d > 0));
    }
}

#[test]
fn survives_20000_mutated_files_without_panicking() {
    let mut w = sample_writer();
    w.set("test.nested", every_value().pop().unwrap().1);
    w.set("test.f32s", Value::f32s([1.0, 2.0]));
    w.set("general.alignment", Value::U32(32));
    let mut w64 = sample_writer();
    w64.set("general.alignment", Value::U32(64));
    let bases = [write(&w), write(&w64)];
    let mut rng = Rng(0xc10e_5eed_9e37_79b9);
    let mut accepted = 0;
    for iter in 0..20_000 {
        let base = &bases[iter % bases.len()];
        let bytes = mutate(&mut rng, base);
        let result = std::panic::catch_unwind(|| {
            if let Ok(f) = GgufFile::from_bytes(bytes.clone()) {
                check_consistent(&f);
                true
            } else {
                false
            }
        });
        match result {
            Ok(ok) => accepted += ok as usize,
            Err(_) => panic!(
                "iteration {iter} panicked on {} bytes: {bytes:02x?}",
                bytes.len()
            ),
        }
    }
    eprintln!("{accepted} of 20000 mutated files accepted");
    // The mutations must exercise both outcomes to mean anything.
    assert!(accepted > 100, "only {accepted} variants accepted");
    assert!(accepted < 19_000, "{accepted} variants accepted");
}
