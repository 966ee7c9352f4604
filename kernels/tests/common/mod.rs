//! Deterministic data and aligned byte buffers for the kernel tests.
#![allow(dead_code)]

use kernels::GgmlType;

/// splitmix64: a fixed-seed generator, so every run sees the same data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    /// Roughly normal (sum of uniforms), scaled.
    pub fn normal(&mut self, scale: f32) -> f32 {
        (0..4).map(|_| self.uniform()).sum::<f32>() * 0.866 * scale
    }
}

/// A row with a spread of magnitudes per block, some exact zeros, and a
/// constant block.
pub fn test_row(rng: &mut Rng, n: usize) -> Vec<f32> {
    let mut x: Vec<f32> = (0..n)
        .map(|i| {
            let block_scale = [0.01f32, 1.0, 40.0][(i / 32) % 3];
            rng.normal(block_scale)
        })
        .collect();
    for v in x.iter_mut().take(5) {
        *v = 0.0;
    }
    if n >= 96 {
        x[64..96].fill(0.75);
    }
    x
}

/// Bytes with 4-byte alignment (block structs hold f16/f32 fields).
pub struct Buf {
    words: Vec<u32>,
    len: usize,
}

impl Buf {
    pub fn zeroed(len: usize) -> Buf {
        Buf {
            words: vec![0; len.div_ceil(4)],
            len,
        }
    }
    pub fn for_row(ty: GgmlType, n: usize) -> Buf {
        Buf::zeroed(ty.row_bytes(n as u64).expect("whole blocks") as usize)
    }
    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }
}

pub fn quantize(ty: GgmlType, x: &[f32], imatrix: Option<&[f32]>) -> Buf {
    let mut b = Buf::for_row(ty, x.len());
    kernels::scalar::quantize_row(ty, x, b.bytes_mut(), imatrix);
    b
}

pub fn dequantize(ty: GgmlType, b: &Buf, n: usize) -> Vec<f32> {
    let mut y = vec![0f32; n];
    kernels::scalar::dequantize_row(ty, b.bytes(), &mut y);
    y
}

pub fn f16_at(bytes: &[u8], off: usize) -> f32 {
    half::f16::from_le_bytes([bytes[off], bytes[off + 1]]).to_f32()
}

/// Little-endian f32s from a fixture's bytes.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
