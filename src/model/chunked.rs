//! The chunked form of the gated delta rule (docs/DESIGN.md §2.1, chunk 64).
//!
//! For one value head, a chunk of C tokens with initial state S₀ (`d_k×d_v`),
//! cumulative log-decay `G_t = Σ_{s≤t} g_s` (within the chunk) and `q` already
//! L2-normalised:
//! ```text
//! δ_t = β_t · ( v_t − e^{G_t} S₀ᵀk_t − Σ_{s<t} e^{G_t−G_s} (k_t·k_s) δ_s )   (forward substitution:
//!        the UT transform, solving (I + A) δ = β(v − e^G S₀ᵀk) with A strictly lower)
//! o_t = scale · ( e^{G_t} S₀ᵀq_t + Σ_{s≤t} e^{G_t−G_s} (q_t·k_s) δ_s )
//! S_C = e^{G_{C−1}} S₀ + Σ_s e^{G_{C−1}−G_s} k_s δ_sᵀ
//! ```
//! which unrolls the token recurrence `S_t = e^{g_t} S_{t−1} + k_t δ_tᵀ`
//! exactly (only the rounding differs). Same state layout as the token form
//! (`s[j][i] = S[i][j]`).

/// Tokens per chunk.
pub const CHUNK: usize = 64;

/// Per-head work space for one chunk.
#[derive(Debug, Clone)]
pub struct ChunkScratch {
    /// `[C][d]` S₀ᵀk_t, S₀ᵀq_t, δ_t.
    sk: Vec<f32>,
    sq: Vec<f32>,
    delta: Vec<f32>,
    /// `[C][C]` k_t·k_s and q_t·k_s.
    kk: Vec<f32>,
    qk: Vec<f32>,
    /// `[C]` cumulative log-decay.
    gcum: Vec<f32>,
}

impl ChunkScratch {
    pub fn new(d: usize) -> ChunkScratch {
        ChunkScratch {
            sk: vec![0.0; CHUNK * d],
            sq: vec![0.0; CHUNK * d],
            delta: vec![0.0; CHUNK * d],
            kk: vec![0.0; CHUNK * CHUNK],
            qk: vec![0.0; CHUNK * CHUNK],
            gcum: vec![0.0; CHUNK],
        }
    }
}

/// One head's inputs for `n` tokens: row `t` of q/k/v at `rows[t*stride + off..]`,
/// g and β at `gates[t*gstride + h]`.
pub struct HeadInputs<'a> {
    pub rows: &'a [f32],
    pub stride: usize,
    pub q_off: usize,
    pub k_off: usize,
    pub v_off: usize,
    pub gate: &'a [f32],
    pub beta: &'a [f32],
    pub gstride: usize,
    pub h: usize,
    pub d: usize,
}

impl HeadInputs<'_> {
    #[inline]
    fn q(&self, t: usize) -> &[f32] {
        &self.rows[t * self.stride + self.q_off..][..self.d]
    }
    #[inline]
    fn k(&self, t: usize) -> &[f32] {
        &self.rows[t * self.stride + self.k_off..][..self.d]
    }
    #[inline]
    fn v(&self, t: usize) -> &[f32] {
        &self.rows[t * self.stride + self.v_off..][..self.d]
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Runs `n` tokens through one head in chunks, advancing `s` and writing the
/// scaled read-outs to `out` (`[n][d]`).
pub fn head(
    s: &mut [f32],
    x: &HeadInputs,
    n: usize,
    scale: f32,
    cs: &mut ChunkScratch,
    out: &mut [f32],
) {
    let d = x.d;
    let mut c0 = 0;
    while c0 < n {
        let c = CHUNK.min(n - c0);
        // Cumulative decay and the products with the initial state.
        let mut acc = 0.0f32;
        for t in 0..c {
            acc += x.gate[(c0 + t) * x.gstride + x.h];
            cs.gcum[t] = acc;
            let (k, q) = (x.k(c0 + t), x.q(c0 + t));
            for (j, row) in s.chunks_exact(d).enumerate() {
                cs.sk[t * d + j] = dot(row, k);
                cs.sq[t * d + j] = dot(row, q);
            }
            for u in 0..=t {
                let ku = x.k(c0 + u);
                cs.kk[t * CHUNK + u] = dot(k, ku);
                cs.qk[t * CHUNK + u] = dot(q, ku);
            }
        }
        // δ by forward substitution, then the read-outs.
        for t in 0..c {
            let beta = x.beta[(c0 + t) * x.gstride + x.h];
            let gt = cs.gcum[t];
            let et = gt.exp();
            let v = x.v(c0 + t);
            let (done, rest) = cs.delta.split_at_mut(t * d);
            let dt = &mut rest[..d];
            for j in 0..d {
                dt[j] = v[j] - et * cs.sk[t * d + j];
            }
            for u in 0..t {
                let a = (gt - cs.gcum[u]).exp() * cs.kk[t * CHUNK + u];
                for (dj, &du) in dt.iter_mut().zip(&done[u * d..(u + 1) * d]) {
                    *dj -= a * du;
                }
            }
            for dj in dt.iter_mut() {
                *dj *= beta;
            }
            let o = &mut out[(c0 + t) * d..(c0 + t + 1) * d];
            for (oj, &sq) in o.iter_mut().zip(&cs.sq[t * d..(t + 1) * d]) {
                *oj = et * sq;
            }
            for u in 0..=t {
                let a = (gt - cs.gcum[u]).exp() * cs.qk[t * CHUNK + u];
                for (oj, &du) in o.iter_mut().zip(&cs.delta[u * d..(u + 1) * d]) {
                    *oj += a * du;
                }
            }
            for oj in o.iter_mut() {
                *oj *= scale;
            }
        }
        // The state at the chunk's end.
        let glast = cs.gcum[c - 1];
        let elast = glast.exp();
        let mut tail = [0.0f32; CHUNK];
        for (e, &g) in tail.iter_mut().zip(&cs.gcum[..c]) {
            *e = (glast - g).exp();
        }
        for (j, row) in s.chunks_exact_mut(d).enumerate() {
            for si in row.iter_mut() {
                *si *= elast;
            }
            for (u, &decay) in tail[..c].iter().enumerate() {
                let a = decay * cs.delta[u * d + j];
                for (si, &ki) in row.iter_mut().zip(x.k(c0 + u)) {
                    *si += a * ki;
                }
            }
        }
        c0 += c;
    }
}
