//! KL divergence of a model from a base model, as llama-perplexity measures it
//! (`--kl-divergence-base FILE` writes the base's log-probabilities,
//! `--kl-divergence` scores another model against them), in its file format,
//! so base files go both ways between the two tools:
//!
//! ```text
//! "_logits_"  u32 n_ctx   i32 n_vocab   i32 n_chunk   i32 tokens[n_chunk · n_ctx]
//! per chunk, per scored position (n_ctx − 1 − n_ctx/2 of them):
//!     f32 scale, f32 min_log_prob, u16 q[nv − 4]       nv = 2·⌈n_vocab/2⌉ + 4
//!     log p_i ≈ scale · q_i + min_log_prob   (logits below max − 16 stored as 0)
//! ```
//! The arithmetic (f32 where llama.cpp uses float, f64 sums) follows
//! llama-perplexity's, so the statistics agree with its to print precision.
//! The windows and the softmax denominator are [`crate::score`]'s.

use std::io::{self, Read, Write};

/// The file's magic.
pub const MAGIC: &[u8; 8] = b"_logits_";

/// u16 slots per stored position.
pub fn slots(n_vocab: usize) -> usize {
    2 * n_vocab.div_ceil(2) + 4
}

/// ggml's `nearest_int` (round half to even, |x| < 2²²).
fn nearest_int(x: f32) -> u16 {
    x.round_ties_even() as i32 as u16
}

/// Encodes one position's logits as llama-perplexity stores them; returns the
/// NLL of `target` (for the base run's own perplexity).
pub fn encode(logits: &[f32], target: u32, out: &mut [u16]) -> f64 {
    let mut max = logits[0];
    let mut min = logits[0];
    for &x in &logits[1..] {
        max = max.max(x);
        min = min.min(x);
    }
    let min = min.max(max - 16.0);
    let sum_exp = crate::score::sum_exp(logits, max);
    let log_sum_exp = sum_exp.ln() as f32;
    let min_log_prob = min - max - log_sum_exp;
    let scale = (max - min) / 65535.0;
    let (head, q) = out.split_at_mut(4);
    head[..2].copy_from_slice(bytemuck::cast_slice(&[scale.to_bits()]));
    head[2..].copy_from_slice(bytemuck::cast_slice(&[min_log_prob.to_bits()]));
    if scale != 0.0 {
        let inv = 1.0 / scale;
        for (qi, &x) in q.iter_mut().zip(logits) {
            *qi = if x > min {
                nearest_int(inv * (x - min))
            } else {
                0
            };
        }
    } else {
        q.fill(0);
    }
    (max + log_sum_exp - logits[target as usize]) as f64
}

/// The running sums of llama-perplexity's `kl_divergence_result`.
#[derive(Clone, Debug, Default)]
pub struct KldSums {
    pub sum_nll: f64,
    pub sum_nll2: f64,
    pub sum_nll_base: f64,
    pub sum_nll_base2: f64,
    pub sum_nll_nll_base: f64,
    pub sum_kld: f64,
    pub sum_kld2: f64,
    pub sum_p_diff: f64,
    pub sum_p_diff2: f64,
    pub sum_p_diff4: f64,
    pub max_p_diff: f32,
    pub n_same_top: usize,
    pub count: usize,
    /// Every position's KLD and Δp, for the percentiles.
    pub kld_values: Vec<f32>,
    pub p_diff_values: Vec<f32>,
}

impl KldSums {
    /// Scores one position's logits against its stored base.
    pub fn add(&mut self, logits: &[f32], base: &[u16], target: u32) {
        let mut max = logits[0];
        let mut imax = 0;
        for (i, &x) in logits.iter().enumerate().skip(1) {
            if x > max {
                max = x;
                imax = i;
            }
        }
        let sum_exp = crate::score::sum_exp(logits, max);
        let log_sum_exp = sum_exp.ln() as f32;
        let head: &[u32] = bytemuck::cast_slice(&base[..4]);
        let (scale, min_log_prob) = (f32::from_bits(head[0]), f32::from_bits(head[1]));
        let q = &base[4..];
        let t = target as usize;
        let nll = max + log_sum_exp - logits[t];
        self.sum_nll += nll as f64;
        self.sum_nll2 += (nll * nll) as f64;
        let nll_base = -(scale * q[t] as f32 + min_log_prob);
        self.sum_nll_base += nll_base as f64;
        self.sum_nll_base2 += (nll_base * nll_base) as f64;
        self.sum_nll_nll_base += (nll * nll_base) as f64;
        let log_norm = max + log_sum_exp;
        let mut sum = 0f64;
        let mut imax_base = 0;
        let mut p_log_base_max = 0f32;
        for (i, &x) in logits.iter().enumerate() {
            let p_log_base = scale * q[i] as f32 + min_log_prob;
            if i == 0 || p_log_base > p_log_base_max {
                p_log_base_max = p_log_base;
                imax_base = i;
            }
            if p_log_base > -16.0 {
                let p_base = p_log_base.exp();
                sum += (p_base * (p_log_base - x + log_norm)) as f64;
            }
        }
        self.sum_kld += sum;
        self.sum_kld2 += sum * sum;
        self.count += 1;
        self.n_same_top += (imax == imax_base) as usize;
        let p_diff = (-nll).exp() - (-nll_base).exp();
        self.sum_p_diff += p_diff as f64;
        let p_diff2 = (p_diff * p_diff) as f64;
        self.sum_p_diff2 += p_diff2;
        self.sum_p_diff4 += p_diff2 * p_diff2;
        self.max_p_diff = self.max_p_diff.max(p_diff.abs());
        self.kld_values.push(sum as f32);
        self.p_diff_values.push(p_diff);
    }
}

/// llama-perplexity's mean and its uncertainty (0 for ten values or fewer).
fn mean_unc(sum: f64, sum2: f64, count: usize) -> (f64, f64) {
    if count < 1 {
        return (0.0, 0.0);
    }
    let f = sum / count as f64;
    let df = sum2 / count as f64 - f * f;
    let df = if df > 0.0 && count > 10 {
        (df / (count - 1) as f64).sqrt()
    } else {
        0.0
    };
    (f, df)
}

fn covariance(a: f64, b: f64, ab: f64, count: usize) -> f64 {
    if count < 10 {
        return 0.0;
    }
    let n = count as f64;
    (ab / n - (a / n) * (b / n)) / (n - 1.0)
}

/// llama-perplexity's per-chunk line: PPL, ln(PPL(Q)/PPL(base)), KLD, Δp RMS,
/// same top p, each ± its uncertainty.
pub fn chunk_line(chunk: usize, k: &KldSums) -> String {
    let lp = mean_unc(k.sum_nll, k.sum_nll2, k.count);
    let ppl = lp.0.exp();
    let lb = mean_unc(k.sum_nll_base, k.sum_nll_base2, k.count);
    let cov = covariance(k.sum_nll, k.sum_nll_base, k.sum_nll_nll_base, k.count);
    let ratio = lp.0 - lb.0;
    let ratio_unc = (lp.1 * lp.1 + lb.1 * lb.1 - 2.0 * cov).sqrt();
    let kl = mean_unc(k.sum_kld, k.sum_kld2, k.count);
    let mse = mean_unc(k.sum_p_diff2, k.sum_p_diff4, k.count);
    let rms = mse.0.sqrt();
    let rms_unc = 0.5 / rms * mse.1;
    let top = k.n_same_top as f64 / k.count as f64;
    let top_unc = (top * (1.0 - top) / (k.count as f64 - 1.0)).sqrt();
    format!(
        "{chunk:4}    {ppl:9.4} ± {:9.4}    {ratio:10.5} ± {ratio_unc:10.5}    {:10.5} ± {:10.5}    {:6.3} ± {:6.3} %    {:6.3} ± {:6.3} %",
        ppl * lp.1,
        kl.0,
        kl.1,
        100.0 * rms,
        100.0 * rms_unc,
        100.0 * top,
        100.0 * top_unc
    )
}

/// The percentile `fraction` of sorted `v`, interpolated as llama-perplexity does.
fn percentile(v: &[f32], fraction: f32) -> f32 {
    if fraction <= 0.0 {
        return v[0];
    }
    if fraction >= 1.0 {
        return v[v.len() - 1];
    }
    let p = fraction * (v.len() - 1) as f32;
    let ip = p as usize;
    let p = p - ip as f32;
    (1.0 - p) * v[ip] + p * v[(ip + 1).min(v.len() - 1)]
}

fn median(v: &[f32]) -> f32 {
    let n = v.len();
    if n.is_multiple_of(2) {
        0.5 * (v[n / 2] + v[n / 2 - 1])
    } else {
        v[n / 2]
    }
}

/// llama-perplexity's closing statistics (nothing below 100 scored positions,
/// as there).
pub fn report(k: &KldSums) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    if k.count < 100 {
        return s;
    }
    let mut kv = k.kld_values.clone();
    let mut pv = k.p_diff_values.clone();
    kv.sort_by(f32::total_cmp);
    pv.sort_by(f32::total_cmp);
    let lp = mean_unc(k.sum_nll, k.sum_nll2, k.count);
    let (ppl, ppl_unc) = (lp.0.exp(), lp.0.exp() * lp.1);
    let lb = mean_unc(k.sum_nll_base, k.sum_nll_base2, k.count);
    let (pb, pb_unc) = (lb.0.exp(), lb.0.exp() * lb.1);
    let cov = covariance(k.sum_nll, k.sum_nll_base, k.sum_nll_nll_base, k.count);
    let _ = writeln!(s, "====== Perplexity statistics ======");
    let _ = writeln!(
        s,
        "Mean PPL(Q)                   : {ppl:10.6} ± {ppl_unc:10.6}"
    );
    let _ = writeln!(
        s,
        "Mean PPL(base)                : {pb:10.6} ± {pb_unc:10.6}"
    );
    let _ = writeln!(
        s,
        "Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2}%",
        100.0 * cov / (lp.1 * lb.1)
    );
    let ratio = lp.0 - lb.0;
    let ratio_unc = (lp.1 * lp.1 + lb.1 * lb.1 - 2.0 * cov).sqrt();
    let _ = writeln!(
        s,
        "Mean ln(PPL(Q)/PPL(base))     : {ratio:10.6} ± {ratio_unc:10.6}"
    );
    let r = ratio.exp();
    let _ = writeln!(
        s,
        "Mean PPL(Q)/PPL(base)         : {r:10.6} ± {:10.6}",
        r * ratio_unc
    );
    let diff_unc = (ppl_unc * ppl_unc + pb_unc * pb_unc - 2.0 * ppl * pb * cov).sqrt();
    let _ = writeln!(
        s,
        "Mean PPL(Q)-PPL(base)         : {:10.6} ± {diff_unc:10.6}",
        ppl - pb
    );
    let _ = writeln!(s);
    let _ = writeln!(s, "====== KL divergence statistics ======");
    let kl = mean_unc(k.sum_kld, k.sum_kld2, k.count);
    let _ = writeln!(s, "Mean    KLD: {:10.6} ± {:10.6}", kl.0, kl.1);
    let _ = writeln!(s, "Maximum KLD: {:10.6}", kv[kv.len() - 1]);
    for (label, f) in [
        ("99.9%", 0.999),
        ("99.0%", 0.990),
        ("95.0%", 0.950),
        ("90.0%", 0.900),
    ] {
        let _ = writeln!(s, "{label}   KLD: {:10.6}", percentile(&kv, f));
    }
    let _ = writeln!(s, "Median  KLD: {:10.6}", median(&kv));
    for (label, f) in [
        ("10.0%", 0.100),
        (" 5.0%", 0.050),
        (" 1.0%", 0.010),
        (" 0.1%", 0.001),
    ] {
        let _ = writeln!(s, "{label}   KLD: {:10.6}", percentile(&kv, f));
    }
    let _ = writeln!(s, "Minimum KLD: {:10.6}", kv[0]);
    let _ = writeln!(s);
    let _ = writeln!(s, "====== Token probability statistics ======");
    let pd = mean_unc(k.sum_p_diff, k.sum_p_diff2, k.count);
    let _ = writeln!(
        s,
        "Mean    Δp: {:6.3} ± {:5.3} %",
        100.0 * pd.0,
        100.0 * pd.1
    );
    let _ = writeln!(s, "Maximum Δp: {:6.3}%", 100.0 * pv[pv.len() - 1]);
    for (label, f) in [
        ("99.9%", 0.999),
        ("99.0%", 0.990),
        ("95.0%", 0.950),
        ("90.0%", 0.900),
        ("75.0%", 0.750),
    ] {
        let _ = writeln!(s, "{label}   Δp: {:6.3}%", 100.0 * percentile(&pv, f));
    }
    let _ = writeln!(s, "Median  Δp: {:6.3}%", 100.0 * median(&pv));
    for (label, f) in [
        ("25.0%", 0.250),
        ("10.0%", 0.100),
        (" 5.0%", 0.050),
        (" 1.0%", 0.010),
        (" 0.1%", 0.001),
    ] {
        let _ = writeln!(s, "{label}   Δp: {:6.3}%", 100.0 * percentile(&pv, f));
    }
    let _ = writeln!(s, "Minimum Δp: {:6.3}%", 100.0 * pv[0]);
    let mse = mean_unc(k.sum_p_diff2, k.sum_p_diff4, k.count);
    let rms = mse.0.sqrt();
    let _ = writeln!(
        s,
        "RMS Δp    : {:6.3} ± {:5.3} %",
        100.0 * rms,
        100.0 * 0.5 / rms * mse.1
    );
    let top = k.n_same_top as f64 / k.count as f64;
    let _ = writeln!(
        s,
        "Same top p: {:6.3} ± {:5.3} %",
        100.0 * top,
        100.0 * (top * (1.0 - top) / (k.count as f64 - 1.0)).sqrt()
    );
    s
}

/// A base file's header and tokens.
pub struct BaseHeader {
    pub n_ctx: usize,
    pub n_vocab: usize,
    pub n_chunk: usize,
    pub tokens: Vec<u32>,
}

/// Most tokens a base file may claim (a hostile header must not allocate).
const MAX_BASE_TOKENS: u64 = 1 << 28;

fn bad(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// Reads and checks a base file's header and tokens; `file_len` bounds what
/// it may claim.
pub fn read_header(r: &mut dyn Read, file_len: u64) -> io::Result<BaseHeader> {
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)
        .map_err(|_| bad("too short for a log-probability file"))?;
    if &magic != MAGIC {
        return Err(bad("not a log-probability file (no _logits_ magic)"));
    }
    let mut w = [0u8; 12];
    r.read_exact(&mut w).map_err(|_| bad("truncated header"))?;
    let n_ctx = u32::from_le_bytes(w[0..4].try_into().unwrap()) as u64;
    let n_vocab = i32::from_le_bytes(w[4..8].try_into().unwrap());
    let n_chunk = i32::from_le_bytes(w[8..12].try_into().unwrap());
    if n_ctx < 4 || n_vocab < 1 || n_chunk < 1 {
        return Err(bad(format!(
            "bad header (n_ctx {n_ctx}, n_vocab {n_vocab}, n_chunk {n_chunk})"
        )));
    }
    let (n_vocab, n_chunk) = (n_vocab as u64, n_chunk as u64);
    let n_tok = n_ctx * n_chunk;
    let scored = n_ctx - 1 - n_ctx / 2;
    let need = 20 + 4 * n_tok + n_chunk * scored * slots(n_vocab as usize) as u64 * 2;
    if n_tok > MAX_BASE_TOKENS || need != file_len {
        return Err(bad(format!(
            "the header (n_ctx {n_ctx}, n_vocab {n_vocab}, n_chunk {n_chunk}) needs {need} bytes, the file has {file_len}"
        )));
    }
    let mut raw = vec![0u8; 4 * n_tok as usize];
    r.read_exact(&mut raw)
        .map_err(|_| bad("truncated tokens"))?;
    let mut tokens = Vec::with_capacity(n_tok as usize);
    for c in raw.chunks_exact(4) {
        let t = i32::from_le_bytes(c.try_into().unwrap());
        if t < 0 || t as u64 >= n_vocab {
            return Err(bad(format!(
                "token {t} is outside the vocabulary of {n_vocab}"
            )));
        }
        tokens.push(t as u32);
    }
    Ok(BaseHeader {
        n_ctx: n_ctx as usize,
        n_vocab: n_vocab as usize,
        n_chunk: n_chunk as usize,
        tokens,
    })
}

/// Writes a base file's header and tokens.
pub fn write_header(
    w: &mut dyn Write,
    n_ctx: usize,
    n_vocab: usize,
    tokens: &[u32],
) -> io::Result<()> {
    w.write_all(MAGIC)?;
    w.write_all(&(n_ctx as u32).to_le_bytes())?;
    w.write_all(&(n_vocab as i32).to_le_bytes())?;
    w.write_all(&((tokens.len() / n_ctx) as i32).to_le_bytes())?;
    for &t in tokens {
        w.write_all(&(t as i32).to_le_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_scored_against_its_own_base_has_zero_divergence() {
        let n = 50;
        let mut k = KldSums::default();
        for p in 0..200u32 {
            let logits: Vec<f32> = (0..n)
                .map(|i| ((i as u32 * 7 + p * 13) % 17) as f32 * 0.3)
                .collect();
            let mut q = vec![0u16; slots(n)];
            let nll = encode(&logits, p % n as u32, &mut q);
            k.add(&logits, &q, p % n as u32);
            assert!(
                (k.sum_nll - k.sum_nll_base).abs() < 1e-3 * k.count as f64,
                "{nll}"
            );
        }
        assert_eq!(k.n_same_top, k.count);
        // Quantised log-probabilities: within a few 1e-5 nats.
        assert!(k.sum_kld.abs() / (k.count as f64) < 1e-4, "{}", k.sum_kld);
        let r = report(&k);
        assert!(r.contains("Same top p: 100.000"), "{r}");
    }

    #[test]
    fn a_hostile_header_is_an_error_not_an_allocation() {
        let mut f = MAGIC.to_vec();
        f.extend(512u32.to_le_bytes());
        f.extend(1000i32.to_le_bytes());
        f.extend(i32::MAX.to_le_bytes());
        let e = read_header(&mut f.as_slice(), f.len() as u64)
            .err()
            .unwrap();
        assert!(e.to_string().contains("needs"), "{e}");
        let e = read_header(&mut &b"_logitz_xxxxxxxxxxxx"[..], 20)
            .err()
            .unwrap();
        assert!(e.to_string().contains("magic"), "{e}");
    }
}
