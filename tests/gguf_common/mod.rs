//! Helpers shared by the GGUF test files: hand-built bytes and small files.
#![allow(dead_code)]

use clover::gguf::{GgufError, GgufFile, GgufWriter, Value, ValueType};
use kernels::GgmlType;

// ---------------------------------------------------------------- helpers

/// Hand-built GGUF bytes, for files the writer refuses to produce.
#[derive(Clone, Default)]
pub struct Raw(pub Vec<u8>);

impl Raw {
    pub fn header(version: u32, n_tensors: u64, n_kv: u64) -> Raw {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// A key with a u32 value.
    pub fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key).u32(ValueType::U32 as u32).u32(v)
    }
    pub fn tensor(&mut self, name: &str, dims: &[u64], ty: u32, offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(ty).u64(offset)
    }
    pub fn pad_to(&mut self, a: usize) -> &mut Self {
        while !self.0.len().is_multiple_of(a) {
            self.0.push(0);
        }
        self
    }
    pub fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    pub fn done(&self) -> Vec<u8> {
        self.0.clone()
    }
}

/// Writes a file with the writer into memory, filling tensor `i` with bytes
/// `(i * 31 + j) % 251`.
pub fn write(w: &GgufWriter) -> Vec<u8> {
    let mut out = Vec::new();
    w.write(&mut out, |i, plan, o| {
        o.write_all(&pattern(i, plan.n_bytes()? as usize))
    })
    .unwrap();
    out
}

pub fn pattern(i: usize, n: usize) -> Vec<u8> {
    (0..n).map(|j| ((i * 31 + j) % 251) as u8).collect()
}

pub fn parse(bytes: Vec<u8>) -> GgufFile {
    match GgufFile::from_bytes(bytes) {
        Ok(f) => f,
        Err(e) => panic!("valid file rejected: {e}"),
    }
}

/// Parses bytes that must be rejected; the message must be one line.
pub fn reject(bytes: Vec<u8>) -> GgufError {
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
pub fn sample_writer() -> GgufWriter {
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
pub fn one_key(type_id: u32, value: &[u8]) -> Vec<u8> {
    Raw::header(3, 0, 1)
        .str("k")
        .u32(type_id)
        .bytes(value)
        .done()
}

/// A file with one F32 tensor `t` of `dims` at relative `offset`, followed by
/// `data` bytes of data section.
pub fn one_tensor(dims: &[u64], ty: u32, offset: u64, data: usize) -> Vec<u8> {
    Raw::header(3, 1, 0)
        .tensor("t", dims, ty, offset)
        .pad_to(32)
        .zeros(data)
        .done()
}

/// One value of every type, including nested and empty arrays, under
/// distinct keys.
pub fn every_value() -> Vec<(String, Value)> {
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
