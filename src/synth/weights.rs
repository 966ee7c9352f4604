//! Deterministic random weights, generated and encoded chunk by chunk.
//!
//! Every chunk (a run of whole rows, its size fixed by the tensor's shape
//! alone) draws from its own generator seeded from (seed, tensor index, chunk
//! index), so the bytes do not depend on how many threads run or in which
//! order the chunks finish. Scales keep activations finite and spread:
//! matrices N(0, 1/fan_in), norms ≈ 1, `ssm_a = −exp(A_log)` with A in [1, 16],
//! `ssm_dt.bias` the inverse softplus of a step in [1e-3, 1e-1], small conv
//! taps, logits with a standard deviation of about 2.

use std::io::{self, Write};

use kernels::GgmlType;
use rayon::prelude::*;

use super::direct;
use super::presets::Preset;
pub use super::rng::Rng;
use super::tensors::{Role, TensorSpec};

/// Elements generated per chunk (rounded to whole rows, at least one row).
const CHUNK_ELEMS: usize = 1 << 16;
/// Chunks generated in parallel before being written, in order.
const CHUNKS_IN_FLIGHT: usize = 64;

/// How a tensor's elements are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// N(0, std²).
    Normal { std: f64 },
    /// 1 + N(0, std²): norm weights with the +1 baked in.
    AroundOne { std: f64 },
    /// Uniform in [lo, hi).
    Uniform { lo: f64, hi: f64 },
    /// −exp(A_log), A_log uniform in [ln lo, ln hi).
    NegExpLog { lo: f64, hi: f64 },
    /// softplus⁻¹(dt), dt log-uniform in [lo, hi).
    InvSoftplusLogUniform { lo: f64, hi: f64 },
}

impl Init {
    pub fn sample(self, rng: &mut Rng) -> f32 {
        let v = match self {
            Init::Normal { std } => std * rng.normal(),
            Init::AroundOne { std } => 1.0 + std * rng.normal(),
            Init::Uniform { lo, hi } => rng.range(lo, hi),
            Init::NegExpLog { lo, hi } => -rng.range(lo.ln(), hi.ln()).exp(),
            Init::InvSoftplusLogUniform { lo, hi } => {
                let dt = rng.range(lo.ln(), hi.ln()).exp();
                // softplus(x) = dt  ⇔  x = dt + ln(1 − e^{−dt})
                dt + (-(-dt).exp_m1()).ln()
            }
        };
        v as f32
    }
}

/// The distribution of a tensor's elements.
pub fn init_for(t: &TensorSpec) -> Init {
    let fan_in = t.ne[0] as f64;
    let inv_sqrt = 1.0 / fan_in.sqrt();
    match t.role {
        Role::TokenEmbd => Init::Normal { std: 1.0 },
        // Logits = output · (unit-RMS vector): std ≈ 2.
        Role::Output => Init::Normal {
            std: 2.0 * inv_sqrt,
        },
        Role::OutputNorm
        | Role::AttnNorm
        | Role::PostAttnNorm
        | Role::AttnQNorm
        | Role::AttnKNorm
        | Role::SsmNorm
        | Role::NextnNorm => Init::AroundOne { std: 0.05 },
        // Router logits ~ N(0, 1.5²): decisive but not one-hot.
        Role::Router => Init::Normal {
            std: 1.5 * inv_sqrt,
        },
        Role::ShexpGate => Init::Normal { std: inv_sqrt },
        Role::Conv => Init::Normal { std: 0.3 },
        Role::ConvRight => Init::Normal { std: 0.2 },
        Role::DtBias => Init::InvSoftplusLogUniform { lo: 1e-3, hi: 1e-1 },
        Role::SsmA => Init::NegExpLog { lo: 1.0, hi: 16.0 },
        Role::BdLogitScale => Init::Uniform { lo: 4.0, hi: 8.0 },
        Role::BdHistoryWeight => Init::Uniform { lo: 0.5, hi: 2.0 },
        Role::BdHistoryBias => Init::Uniform { lo: -1.0, hi: 1.0 },
        // Every other role is a weight matrix read as x · W: unit-variance
        // products.
        role => {
            debug_assert!(role.is_quantizable(), "{role:?} has no init");
            Init::Normal { std: inv_sqrt }
        }
    }
}

/// How element values become bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Box–Muller f32 draws, encoded by the reference quantisers. Slow for
    /// K-quants; the bytes the parity fixtures of `tiny` and `small` pin.
    Reference,
    /// Quantised blocks drawn directly and Irwin–Hall normals for floats
    /// (see `direct`): minutes instead of hours for `full`. Falls back to
    /// `Reference` for inits that are not plain normals and for types
    /// `direct` does not draw.
    Direct,
}

impl std::str::FromStr for Fill {
    type Err = String;
    fn from_str(s: &str) -> Result<Fill, String> {
        match s {
            "reference" => Ok(Fill::Reference),
            "direct" => Ok(Fill::Direct),
            _ => Err(format!("unknown fill '{s}' (expected reference or direct)")),
        }
    }
}

impl Fill {
    pub fn name(self) -> &'static str {
        match self {
            Fill::Reference => "reference",
            Fill::Direct => "direct",
        }
    }

    /// `Reference` for the test-sized presets, `Direct` for the big ones.
    pub fn for_preset(preset: Preset) -> Fill {
        match preset {
            Preset::Tiny | Preset::Small => Fill::Reference,
            Preset::A3b4l | Preset::Full => Fill::Direct,
        }
    }
}

/// Rows per chunk for a tensor: fixed by its shape alone.
pub fn rows_per_chunk(row_len: usize) -> usize {
    (CHUNK_ELEMS / row_len.max(1)).max(1)
}

/// Generates chunk `chunk` of tensor `index` and encodes it in `ty`.
pub fn chunk_bytes(
    seed: u64,
    index: usize,
    t: &TensorSpec,
    ty: GgmlType,
    chunk: usize,
    fill: Fill,
) -> io::Result<Vec<u8>> {
    let row_len = t.row_len();
    let per = rows_per_chunk(row_len) as u64;
    let first = chunk as u64 * per;
    let rows = per.min(t.n_rows() - first) as usize;
    let init = init_for(t);
    let mut rng = Rng::for_chunk(seed, index, chunk);
    let normal_std = match init {
        Init::Normal { std } if fill == Fill::Direct => Some(std),
        _ => None,
    };
    let src: Vec<f32> = match normal_std {
        Some(std) if direct::supports(ty) => {
            let mut dst = vec![0u8; rows * row_bytes_of(t, ty)?];
            direct::fill_row(ty, std, &mut rng, &mut dst);
            return Ok(dst);
        }
        Some(std) => {
            let s = std as f32;
            (0..rows * row_len)
                .map(|_| s * direct::fast_normal(&mut rng))
                .collect()
        }
        None => (0..rows * row_len).map(|_| init.sample(&mut rng)).collect(),
    };
    let row_bytes = row_bytes_of(t, ty)?;
    let mut dst = vec![0u8; rows * row_bytes];
    for (s, d) in src
        .chunks_exact(row_len)
        .zip(dst.chunks_exact_mut(row_bytes))
    {
        kernels::scalar::quantize_row(ty, s, d, None);
    }
    Ok(dst)
}

fn row_bytes_of(t: &TensorSpec, ty: GgmlType) -> io::Result<usize> {
    let row_len = t.row_len();
    Ok(ty.row_bytes(row_len as u64).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: {row_len} is not a whole number of {ty} blocks", t.name),
        )
    })? as usize)
}

/// Writes tensor `index`'s data: chunks generated in parallel on the current
/// rayon pool, written in order.
pub fn write_tensor(
    seed: u64,
    index: usize,
    t: &TensorSpec,
    ty: GgmlType,
    fill: Fill,
    out: &mut dyn Write,
) -> io::Result<()> {
    let n_chunks = t.n_rows().div_ceil(rows_per_chunk(t.row_len()) as u64) as usize;
    let mut next = 0;
    while next < n_chunks {
        let end = (next + CHUNKS_IN_FLIGHT).min(n_chunks);
        let parts: Vec<Vec<u8>> = (next..end)
            .into_par_iter()
            .map(|c| chunk_bytes(seed, index, t, ty, c, fill))
            .collect::<io::Result<_>>()?;
        for p in parts {
            out.write_all(&p)?;
        }
        next = end;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_softplus_bias_gives_the_drawn_step() {
        let mut rng = Rng::new(7);
        for _ in 0..100 {
            let b = Init::InvSoftplusLogUniform { lo: 1e-3, hi: 1e-1 }.sample(&mut rng) as f64;
            let dt = (1.0 + b.exp()).ln();
            assert!((1e-3 * 0.999..=1e-1 * 1.001).contains(&dt), "dt {dt}");
        }
    }

    #[test]
    fn ssm_a_is_negative_between_minus_sixteen_and_minus_one() {
        let mut rng = Rng::new(1);
        for _ in 0..100 {
            let a = Init::NegExpLog { lo: 1.0, hi: 16.0 }.sample(&mut rng);
            assert!((-16.0..=-1.0).contains(&a), "a {a}");
        }
    }

    #[test]
    fn normal_samples_have_unit_variance() {
        let mut rng = Rng::new(3);
        let n = 100_000;
        let xs: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "var {var}");
    }

    #[test]
    fn chunk_generators_differ_by_tensor_and_chunk() {
        let a = Rng::for_chunk(1, 0, 0).next_u64();
        let b = Rng::for_chunk(1, 0, 1).next_u64();
        let c = Rng::for_chunk(1, 1, 0).next_u64();
        let d = Rng::for_chunk(2, 0, 0).next_u64();
        assert!(a != b && a != c && a != d && b != c);
    }
}
