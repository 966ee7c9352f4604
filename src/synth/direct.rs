//! The fast fill for big presets: quantised blocks drawn directly.
//!
//! Quantising 35 billion f32 normals with the reference K-quant searches
//! takes hours on two cores. Random weights need no search: a block whose
//! quant codes are uniform random bytes and whose scales are fixed is a valid
//! block that every dequantiser reads, and its values have a known spread.
//! So each block gets random code bytes, unit sub-block scales (with a random
//! sign where the format has signed scales, so the mean is zero), and a super
//! scale `d = std / rms(codes)` chosen so that the dequantised values have
//! the tensor's standard deviation. The values are uniform over the format's
//! levels rather than normal; for synthetic weights only a finite, spread,
//! deterministic distribution with the right standard deviation matters.
//!
//! Float tensors use [`fast_normal`], an Irwin–Hall sum of four 16-bit
//! uniforms (one 64-bit draw per value), scaled to unit variance.
//!
//! Byte layouts (ggml's `block_*` structs, little endian):
//! - Q8_0 (34): `d: f16`, `qs: [i8; 32]`; `x = d·q`.
//! - Q4_0 (18): `d: f16`, `qs: [u8; 16]`; `x = d·(q − 8)`.
//! - Q4_K (144): `d, dmin: f16`, `scales[12]`, `qs[128]`; `x = d·sc·q − dmin·m`.
//! - Q5_K (176): `d, dmin: f16`, `scales[12]`, `qh[32]`, `qs[128]`; same with 5-bit q.
//! - Q6_K (210): `ql[128]`, `qh[64]`, `scales: [i8; 16]`, `d: f16`; `x = d·sc·(q − 32)`.
//! - Q3_K (110): `hmask[32]`, `qs[64]`, `scales[12]` (sixteen 6-bit `s`), `d: f16`;
//!   `x = d·(s − 32)·(q − 4)`, `q ∈ 0..8`.
//! - IQ4_XS (136): `d: f16`, `scales_h: u16`, `scales_l[4]`, `qs[128]`;
//!   `x = d·(ls − 32)·kvalues[q]`.

use half::f16;
use kernels::GgmlType;

use super::rng::Rng;

/// One normal-ish value with mean 0 and variance 1 from a single 64-bit
/// draw: the sum of four 16-bit uniforms (Irwin–Hall, n = 4), centred and
/// scaled. Bounded by ±2√3, so always finite.
#[inline]
pub fn fast_normal(rng: &mut Rng) -> f32 {
    let r = rng.next_u64();
    let s = (r & 0xFFFF) + ((r >> 16) & 0xFFFF) + ((r >> 32) & 0xFFFF) + (r >> 48);
    // Each term is uniform on 0..65536: mean 32767.5, variance (65536² − 1)/12.
    const MEAN: f64 = 4.0 * 32767.5;
    // 1 / sqrt(4 · (65536² − 1) / 12)
    const INV_STD: f64 = 2.642_985_077_412_537e-5;
    ((s as f64 - MEAN) * INV_STD) as f32
}

/// The types [`fill_row`] draws directly.
pub fn supports(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q8_0
            | GgmlType::Q4_0
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
            | GgmlType::Q3_K
            | GgmlType::IQ4_XS
    )
}

/// Root mean square of the signed levels of each format when codes are
/// uniform (and sub-block scales are ±1).
fn level_rms(ty: GgmlType) -> f64 {
    let uniform_rms = |levels: i32, offset: f64| {
        let n = levels as f64;
        // Levels 0..n shifted by −offset: variance (n² − 1)/12 plus the bias².
        let mean = (n - 1.0) / 2.0 - offset;
        ((n * n - 1.0) / 12.0 + mean * mean).sqrt()
    };
    match ty {
        GgmlType::Q8_0 => uniform_rms(256, 128.0),
        GgmlType::Q4_0 => uniform_rms(16, 8.0),
        GgmlType::Q4_K => uniform_rms(16, 7.5),
        GgmlType::Q5_K => uniform_rms(32, 15.5),
        GgmlType::Q6_K => uniform_rms(64, 32.0),
        GgmlType::Q3_K => uniform_rms(8, 4.0),
        GgmlType::IQ4_XS => {
            let k = kernels::scalar::iq4_grid::KVALUES_IQ4NL;
            (k.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / 16.0).sqrt()
        }
        _ => 1.0,
    }
}

fn fill_random(rng: &mut Rng, dst: &mut [u8]) {
    let mut words = dst.chunks_exact_mut(8);
    for w in &mut words {
        w.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    let rest = words.into_remainder();
    if !rest.is_empty() {
        let b = rng.next_u64().to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&b[..n]);
    }
}

fn put_f16(dst: &mut [u8], v: f32) {
    dst[..2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
}

/// Fills one row of `ty` blocks with random codes whose dequantised values
/// have mean 0 and standard deviation `std`. `ty` must satisfy [`supports`]
/// and `dst` must be whole blocks.
pub fn fill_row(ty: GgmlType, std: f64, rng: &mut Rng, dst: &mut [u8]) {
    debug_assert!(supports(ty));
    let d = (std / level_rms(ty)) as f32;
    fill_random(rng, dst);
    let size = ty.type_size();
    for b in dst.chunks_exact_mut(size) {
        // Random bytes already hold the codes; one more draw gives the signs.
        let signs = rng.next_u64();
        let sign = |i: u32| if signs >> i & 1 == 1 { -1.0f32 } else { 1.0 };
        match ty {
            GgmlType::Q8_0 | GgmlType::Q4_0 => put_f16(b, sign(0) * d),
            GgmlType::Q4_K | GgmlType::Q5_K => {
                // sc = m = 1 for all eight sub-blocks; dmin = d·(mean code).
                let centre = if ty == GgmlType::Q4_K { 7.5 } else { 15.5 };
                put_f16(&mut b[0..], d);
                let dq = f16::from_f32(d).to_f32();
                put_f16(&mut b[2..], dq * centre);
                b[4..12].fill(1);
                b[12..16].fill(0x11);
            }
            GgmlType::Q6_K => {
                for (i, s) in b[192..208].iter_mut().enumerate() {
                    *s = if signs >> i & 1 == 1 { 0xFF } else { 1 };
                }
                put_f16(&mut b[208..], d);
            }
            GgmlType::Q3_K => {
                // Sixteen 6-bit scales s = 32 ± 1: low nibbles in bytes 0..8
                // (j < 8 low, j ≥ 8 high), top two bits in bytes 8..12.
                let mut s = [0u8; 12];
                for j in 0..16u32 {
                    let l: u8 = if signs >> j & 1 == 1 { 31 } else { 33 };
                    let jj = j as usize;
                    if jj < 8 {
                        s[jj] |= l & 0xF;
                    } else {
                        s[jj - 8] |= (l & 0xF) << 4;
                    }
                    s[8 + jj % 4] |= (l >> 4) << (2 * (jj / 4));
                }
                b[96..108].copy_from_slice(&s);
                put_f16(&mut b[108..], d);
            }
            GgmlType::IQ4_XS => {
                // Eight 6-bit scales ls = 32 ± 1.
                let (mut h, mut l) = (0u16, [0u8; 4]);
                for ib in 0..8u32 {
                    let ls: u8 = if signs >> ib & 1 == 1 { 31 } else { 33 };
                    let i = ib as usize;
                    l[i / 2] |= (ls & 0xF) << (4 * (i % 2));
                    h |= ((ls >> 4) as u16) << (2 * ib);
                }
                put_f16(&mut b[0..], d);
                b[2..4].copy_from_slice(&h.to_le_bytes());
                b[4..8].copy_from_slice(&l);
            }
            _ => unreachable!("fill_row called for {ty}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(xs: &[f32]) -> (f64, f64) {
        let n = xs.len() as f64;
        let mean = xs.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = xs.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        (mean, var.sqrt())
    }

    #[test]
    fn fast_normals_have_zero_mean_and_unit_variance() {
        let mut rng = Rng::new(5);
        let xs: Vec<f32> = (0..200_000).map(|_| fast_normal(&mut rng)).collect();
        let (mean, std) = stats(&xs);
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((std - 1.0).abs() < 0.01, "std {std}");
        assert!(xs.iter().all(|x| x.abs() <= 3.47), "bounded by 2√3");
    }

    #[test]
    fn direct_blocks_dequantise_to_the_requested_spread_in_every_type() {
        let types = [
            GgmlType::Q8_0,
            GgmlType::Q4_0,
            GgmlType::Q4_K,
            GgmlType::Q5_K,
            GgmlType::Q6_K,
            GgmlType::Q3_K,
            GgmlType::IQ4_XS,
        ];
        let n = 256 * 256;
        let std = 0.02;
        for ty in types {
            let mut rng = Rng::new(11);
            let mut bytes = vec![0u8; ty.row_bytes(n as u64).unwrap() as usize];
            fill_row(ty, std, &mut rng, &mut bytes);
            let mut x = vec![0f32; n];
            kernels::scalar::dequantize_row(ty, &bytes, &mut x);
            assert!(x.iter().all(|v| v.is_finite()), "{ty}: non-finite");
            let (mean, s) = stats(&x);
            assert!(mean.abs() < 0.02 * std, "{ty}: mean {mean}");
            assert!((s / std - 1.0).abs() < 0.02, "{ty}: std {s}");
        }
    }

    #[test]
    fn q4_k_direct_blocks_take_sixteen_evenly_spaced_levels() {
        let mut rng = Rng::new(2);
        let mut bytes = vec![0u8; 144 * 4];
        fill_row(GgmlType::Q4_K, 1.0, &mut rng, &mut bytes);
        let mut x = vec![0f32; 1024];
        kernels::scalar::dequantize_row(GgmlType::Q4_K, &bytes, &mut x);
        let d = f16::from_le_bytes([bytes[0], bytes[1]]).to_f32();
        for v in x {
            let k = v / d + 7.5;
            assert!(
                (k - k.round()).abs() < 0.01 && (0.0..=15.0).contains(&k.round()),
                "{k}"
            );
        }
    }
}
