//! The drivers against a naive reference: dequantise the weights and the
//! converted activations with the scalar code, dot in f64.

use super::*;
use crate::{scalar, Isa};

/// splitmix64, uniform in [-1, 1).
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// 4-byte aligned bytes (block structs hold f16/f32 fields).
pub(super) struct Buf(Vec<u32>, usize);

impl Buf {
    pub(super) fn new(len: usize) -> Buf {
        Buf(vec![0; len.div_ceil(4)], len)
    }
    pub(super) fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.0)[..self.1]
    }
    pub(super) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.0)[..self.1]
    }
}

pub(super) const TYPES: [GgmlType; 13] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_NL,
    GgmlType::IQ4_XS,
    GgmlType::F16,
    GgmlType::BF16,
];

/// `rows` quantized rows of `n` random elements of `ty`, and their f32 values.
pub(super) fn quantized(ty: GgmlType, n: usize, rows: usize, rng: &mut Rng) -> (Buf, Vec<f32>) {
    let rb = ty.row_bytes(n as u64).unwrap() as usize;
    let mut buf = Buf::new(rb * rows);
    let mut deq = vec![0.0f32; n * rows];
    let mut src = vec![0.0f32; n];
    for r in 0..rows {
        src.iter_mut().for_each(|v| *v = rng.next());
        let dst = &mut buf.bytes_mut()[r * rb..(r + 1) * rb];
        scalar::quantize_row(ty, &src, dst, None);
        scalar::dequantize_row(ty, dst, &mut deq[r * n..(r + 1) * n]);
    }
    (buf, deq)
}

fn reference(w: &[f32], x: &[f32], n: usize) -> (f32, f32) {
    let dot: f64 = w.iter().zip(x).map(|(a, b)| *a as f64 * *b as f64).sum();
    let mag: f64 = w
        .iter()
        .zip(x)
        .map(|(a, b)| (*a as f64 * *b as f64).abs())
        .sum();
    debug_assert_eq!(w.len(), n);
    (dot as f32, mag as f32)
}

/// Asserts `got[t][o]` ≈ `W[o] · x[t]` (dequantised), tolerance relative to
/// Σ|w·x| (f32 rounding of the block sums only).
fn check(ty: GgmlType, got: &[f32], w: &[f32], x: &[f32], n: usize, n_out: usize, what: &str) {
    let rows = x.len() / n;
    for t in 0..rows {
        for o in 0..n_out {
            let (want, mag) = reference(&w[o * n..(o + 1) * n], &x[t * n..(t + 1) * n], n);
            let g = got[t * n_out + o];
            assert!(
                (g - want).abs() <= 1e-4 * mag + 1e-6,
                "{what} {ty}: row {t} out {o}: got {g}, want {want} (Σ|wx| {mag})"
            );
        }
    }
}

/// Activations `rows x n` converted into `ty.vec_dot_type()`, and their values.
pub(super) fn acts(
    kt: &KernelTable,
    ty: GgmlType,
    n: usize,
    rows: usize,
    rng: &mut Rng,
) -> (Buf, Vec<f32>) {
    let at = ty.vec_dot_type();
    let x: Vec<f32> = (0..n * rows).map(|_| rng.next()).collect();
    let mut buf = Buf::new(at.row_bytes(n as u64).unwrap() as usize * rows);
    quantize_rows(kt, at, &x, n, buf.bytes_mut());
    let mut deq = vec![0.0f32; n * rows];
    let rb = at.row_bytes(n as u64).unwrap() as usize;
    for r in 0..rows {
        scalar::dequantize_row(
            at,
            &buf.bytes()[r * rb..(r + 1) * rb],
            &mut deq[r * n..(r + 1) * n],
        );
    }
    (buf, deq)
}

pub(super) fn pool(threads: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
}

#[test]
fn matvec_matches_dequantised_reference_for_every_type_and_tier() {
    let n = 512;
    let n_out = 70; // not a multiple of MIN_ROWS_PER_TASK
    for isa in Isa::all_available() {
        let kt = KernelTable::new(isa);
        for ty in TYPES {
            let mut rng = Rng(ty.id() as u64);
            let (wb, wf) = quantized(ty, n, n_out, &mut rng);
            let m = QMatrix::new(ty, n, n_out, wb.bytes()).unwrap();
            let (xb, xf) = acts(&kt, ty, n, 1, &mut rng);
            for threads in [1, 2, 3] {
                let mut out = vec![f32::NAN; n_out];
                pool(threads).install(|| matvec(&kt, &m, xb.bytes(), &mut out));
                check(ty, &out, &wf, &xf, n, n_out, &format!("{isa} matvec"));
                // Each output is exactly that row's vec_dot, whatever the split.
                for (o, y) in out.iter().enumerate() {
                    assert_eq!(
                        y.to_bits(),
                        kt.vec_dot(ty)(n, m.row(o), xb.bytes()).to_bits()
                    );
                }
            }
        }
    }
}

#[test]
fn matvec_serial_equals_the_parallel_matvec_bit_for_bit() {
    let (n, n_out) = (512, 70);
    for isa in Isa::all_available() {
        let kt = KernelTable::new(isa);
        for ty in [
            GgmlType::Q4_K,
            GgmlType::IQ4_XS,
            GgmlType::Q6_K,
            GgmlType::Q8_0,
        ] {
            let mut rng = Rng(300 + ty.id() as u64);
            let (wb, _) = quantized(ty, n, n_out, &mut rng);
            let m = QMatrix::new(ty, n, n_out, wb.bytes()).unwrap();
            let (xb, _) = acts(&kt, ty, n, 1, &mut rng);
            let mut par = vec![f32::NAN; n_out];
            pool(2).install(|| matvec(&kt, &m, xb.bytes(), &mut par));
            let mut ser = vec![f32::NAN; n_out];
            matvec_serial(&kt, &m, xb.bytes(), &mut ser);
            let bits = |v: &[f32]| v.iter().map(|y| y.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&ser), bits(&par), "{isa} {ty}");
        }
    }
}

#[test]
fn matmul_matches_dequantised_reference_across_tiles_and_row_blocks() {
    let kt = crate::KernelTable::chosen();
    let n = 256;
    // Past one block of weight rows at ACT_TILE + 3 activation rows (past
    // one ACT_TILE).
    let n_out = row_block(ACT_TILE + 3) + 37;
    for ty in [GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::IQ4_XS] {
        let mut rng = Rng(100 + ty.id() as u64);
        let (wb, wf) = quantized(ty, n, n_out, &mut rng);
        let m = QMatrix::new(ty, n, n_out, wb.bytes()).unwrap();
        for rows in [1usize, 2, ACT_TILE + 3] {
            let (xb, xf) = acts(kt, ty, n, rows, &mut rng);
            let x = QActs::new(ty.vec_dot_type(), n, rows, xb.bytes()).unwrap();
            let mut tile = vec![0.0; matmul_tile_len(rows)];
            for threads in [1, 2] {
                let mut out = vec![f32::NAN; rows * n_out];
                pool(threads).install(|| matmul(kt, &m, &x, &mut out, &mut tile, Mode::Decode));
                check(ty, &out, &wf, &xf, n, n_out, &format!("matmul rows={rows}"));
            }
        }
    }
}

#[test]
fn matmul_of_many_rows_equals_row_by_row_matvec_bit_for_bit() {
    let kt = crate::KernelTable::chosen();
    let (n, n_out, rows) = (256, 300, 5);
    let mut rng = Rng(7);
    let (wb, _) = quantized(GgmlType::Q6_K, n, n_out, &mut rng);
    let m = QMatrix::new(GgmlType::Q6_K, n, n_out, wb.bytes()).unwrap();
    let (xb, _) = acts(kt, GgmlType::Q6_K, n, rows, &mut rng);
    let x = QActs::new(GgmlType::Q8_K, n, rows, xb.bytes()).unwrap();
    let mut out = vec![0.0; rows * n_out];
    matmul(
        kt,
        &m,
        &x,
        &mut out,
        &mut vec![0.0; matmul_tile_len(rows)],
        Mode::Decode,
    );
    let mut one = vec![0.0; n_out];
    for t in 0..rows {
        matvec(kt, &m, x.row(t), &mut one);
        assert_eq!(&out[t * n_out..(t + 1) * n_out], &one[..], "row {t}");
    }
}

#[test]
fn expert_gather_multiplies_each_row_by_its_own_expert() {
    let kt = crate::KernelTable::chosen();
    let (n, n_out, n_expert) = (256, 48, 5);
    for ty in [GgmlType::Q4_K, GgmlType::IQ4_XS, GgmlType::Q8_0] {
        let mut rng = Rng(200 + ty.id() as u64);
        let (wb, wf) = quantized(ty, n, n_out * n_expert, &mut rng);
        let e = QExperts::new(ty, n, n_out, n_expert, wb.bytes()).unwrap();
        let expert_of = [3usize, 0, 3, 4, 1, 1, 2];
        let rows = expert_of.len();
        let (xb, xf) = acts(kt, ty, n, rows, &mut rng);
        let x = QActs::new(ty.vec_dot_type(), n, rows, xb.bytes()).unwrap();
        for threads in [1, 2] {
            let mut out = vec![f32::NAN; rows * n_out];
            pool(threads).install(|| expert_gather(kt, &e, &expert_of, &x, &mut out, Mode::Decode));
            for (r, &ex) in expert_of.iter().enumerate() {
                let wx = &wf[ex * n_out * n..(ex + 1) * n_out * n];
                check(
                    ty,
                    &out[r * n_out..(r + 1) * n_out],
                    wx,
                    &xf[r * n..(r + 1) * n],
                    n,
                    n_out,
                    &format!("expert_gather row {r}"),
                );
            }
        }
    }
}

#[test]
fn shapes_that_do_not_fit_their_bytes_are_rejected() {
    let bytes = vec![0u8; 144 * 3];
    assert!(QMatrix::new(GgmlType::Q4_K, 256, 3, &bytes).is_ok());
    let e = QMatrix::new(GgmlType::Q4_K, 256, 4, &bytes).unwrap_err();
    assert!(e.0.contains("needs 576 bytes"), "{e}");
    let e = QMatrix::new(GgmlType::Q4_K, 100, 1, &bytes).unwrap_err();
    assert!(e.0.contains("whole Q4_K blocks"), "{e}");
    assert!(QActs::new(GgmlType::Q8_K, 256, 2, &bytes).is_err());
    assert!(QExperts::new(GgmlType::Q4_K, 256, 2, 2, &bytes).is_err());
}

#[test]
#[should_panic(expected = "Q4_K weights need Q8_K activations")]
fn matmul_refuses_activations_of_the_wrong_type() {
    let kt = crate::KernelTable::chosen();
    let w = vec![0u32; 36];
    let m = QMatrix::new(GgmlType::Q4_K, 256, 1, bytemuck::cast_slice(&w)).unwrap();
    let a = vec![0u32; 68 * 2];
    let x = QActs::new(GgmlType::Q8_0, 256, 2, bytemuck::cast_slice(&a)).unwrap();
    matmul(
        kt,
        &m,
        &x,
        &mut [0.0; 2],
        &mut vec![0.0; matmul_tile_len(2)],
        Mode::Decode,
    );
}
