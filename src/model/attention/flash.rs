//! llama.cpp's flash attention (`-fa on`, which its `auto` picks on CPU):
//! the arithmetic of ggml's CPU `flash_attn_ext`, for the commands that print
//! llama's figures with llama's defaults (`perplexity`). The math is
//! [`super::attend`]'s; the rounding is not, so it is a separate path.
//!
//! llama casts an f32 cache to f16 before this op, so a command that runs it
//! makes an f16 cache where f32 was asked for. ggml then takes one of two
//! forms, per batch:
//!
//! - **tiled**, for a batch of at least [`TILE`] rows with K and V both f16:
//!   q stays f32; for each tile of [`TILE`] key positions the scores are
//!   fused-product chains over the head's dims (from zero, dim by dim),
//!   times `1/√d`; the running maximum M moves to the tile's maximum
//!   (accumulator and sum scaled by `exp(M_old − M)`), the tile's weights
//!   are `v_expf(s − M)` summed as `ggml_vec_soft_max_f32` does (16 lanes,
//!   each vector's reduction added in f64), and `acc[j] += w·v[j]` runs as a
//!   fused chain over the tile's positions, per output dim.
//! - **row by row**, otherwise: q converted into the K cache's dot type,
//!   scores through the kernel table one position at a time; a new maximum
//!   scales the accumulator by `exp(M_old − M)`, else the weight is
//!   `exp(s − M)`; the accumulator is f16 when V is f16 (rounded after every
//!   scale and every fused `acc += w·v`) and f32 otherwise; the sum is
//!   `S·ms + w`, fused.
//!
//! Both end with `acc · (1/S)`. Masked positions (beyond the row's own)
//! contribute nothing in either form, so each row is computed alone.

use kernels::{scalar, GgmlType, KernelTable};
use rayon::prelude::*;

use super::super::config::ModelConfig;
use super::super::ops::{fma_dispatch, reduce_add_16, round_to_f16, sigmoid, v_expf, GGML_LANES};
use super::{heads, AttentionScratch, Causal};

/// ggml's flash-attention tile: query rows a batch needs for the tiled form,
/// and key positions per tile.
const TILE: usize = 64;

/// Causal attention of the `t` rows at `pos0..pos0+t` (their K/V already in
/// the cache), gated by `σ(gate)`, in ggml's flash-attention arithmetic
/// (module doc); writes `sc.o`.
pub(super) fn attend_flash(
    kt: &KernelTable,
    cfg: &ModelConfig,
    rows: Causal,
    sc: &mut AttentionScratch,
) {
    let Causal { kv, layer, pos0, t } = rows;
    let (nh, nkv, d, group, scale) = heads(cfg);
    let n = pos0 + t;
    let tiled = t >= TILE && kv.ty_k == GgmlType::F16 && kv.ty_v == GgmlType::F16;
    // Every visible V head, and for the tiled form K too, in f32 (exact
    // for f16), `[pos][g][d]`; the row-by-row form reads K in its own type.
    let need = n * nkv * d;
    let mut bufs = vec![(&mut sc.v_f32, kv.ty_v, true)];
    if tiled {
        bufs.push((&mut sc.kt_f32, kv.ty_k, false));
    }
    for (buf, ty, is_v) in bufs {
        if buf.len() < need {
            buf.resize(need, 0.0);
        }
        buf[..need]
            .par_chunks_mut(nkv * d)
            .enumerate()
            .for_each(|(s, heads)| {
                for (g, row) in heads.chunks_exact_mut(d).enumerate() {
                    let head = match is_v {
                        true => kv.v_head(layer, s, g),
                        false => kv.k_head(layer, s, g),
                    };
                    scalar::dequantize_row(ty, head, row);
                }
            });
    }
    let (kf, vf, qg) = (&sc.kt_f32, &sc.v_f32, &sc.qg);
    let k_dot_ty = kv.ty_k.vec_dot_type();
    let q_bytes = k_dot_ty.row_bytes(d as u64).expect("head is whole blocks") as usize;
    let (dot, quant) = (kt.vec_dot(kv.ty_k), kt.quantize(k_dot_ty));
    let f16_acc = kv.ty_v == GgmlType::F16;
    sc.o[..t * nh * d]
        .par_chunks_mut(d)
        .enumerate()
        .for_each_init(
            || (Vec::new(), vec![0u64; q_bytes.div_ceil(8)]),
            |(w, q_act), (at, o)| {
                let (i, h) = (at / nh, at % nh);
                let g = h / group;
                let q = &qg[i * nh * 2 * d + h * 2 * d..][..d];
                let n_vis = pos0 + i + 1;
                if tiled {
                    w.resize(TILE, 0.0);
                    let heads = Heads {
                        kf,
                        vf,
                        stride: nkv * d,
                        off: g * d,
                    };
                    tiled_row(q, &heads, n_vis, scale, w, o);
                } else {
                    let q_act = &mut bytemuck::cast_slice_mut::<u64, u8>(q_act)[..q_bytes];
                    quant(q, q_act);
                    w.clear();
                    w.extend((0..n_vis).map(|s| dot(d, kv.k_head(layer, s, g), q_act) * scale));
                    row_by_row(f16_acc, w, vf, nkv * d, g * d, o);
                }
                let gate = &qg[i * nh * 2 * d + h * 2 * d + d..][..d];
                for (x, &gj) in o.iter_mut().zip(gate) {
                    *x *= sigmoid(gj);
                }
            },
        );
}

fma_dispatch!(
    /// One row of the tiled form (module doc) over positions `0..n_vis` of
    /// `heads`, `w` a tile's weights; writes the normalised output to `o`.
    fn tiled_row(
        q: &[f32],
        heads: &Heads,
        n_vis: usize,
        scale: f32,
        w: &mut [f32],
        o: &mut [f32]
    ) => tiled_row_body
);

/// One K/V head of every position in f32: position s at `s·stride + off`
/// of `kf` / `vf`.
#[derive(Clone, Copy)]
struct Heads<'a> {
    kf: &'a [f32],
    vf: &'a [f32],
    stride: usize,
    off: usize,
}

#[inline(always)]
fn tiled_row_body(
    q: &[f32],
    heads: &Heads,
    n_vis: usize,
    scale: f32,
    w: &mut [f32],
    o: &mut [f32],
) {
    let Heads {
        kf,
        vf,
        stride,
        off,
    } = *heads;
    let d = o.len();
    let (mut m, mut sum) = (f32::NEG_INFINITY, 0f32);
    o.fill(0.0);
    for c0 in (0..n_vis).step_by(TILE) {
        let c1 = (c0 + TILE).min(n_vis);
        w.fill(f32::NEG_INFINITY);
        for (s, ws) in (c0..c1).zip(w.iter_mut()) {
            let k = &kf[s * stride + off..][..d];
            let acc = q.iter().zip(k).fold(0f32, |a, (&x, &y)| x.mul_add(y, a));
            *ws = acc * scale;
        }
        let tile_max = w.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let m_new = m.max(tile_max);
        if m_new > m {
            let ms = (m - m_new).exp();
            o.iter_mut().for_each(|x| *x *= ms);
            sum *= ms;
        }
        m = m_new;
        let mut tile_sum = 0f64;
        for lanes in w.chunks_exact_mut(GGML_LANES) {
            lanes.iter_mut().for_each(|x| *x = v_expf(*x - m));
            tile_sum += reduce_add_16(&<[f32; GGML_LANES]>::try_from(&*lanes).unwrap()) as f64;
        }
        sum = (sum as f64 + tile_sum) as f32;
        // Per output dim a fused chain over the tile's positions in order.
        for s in c0..c1 {
            let ws = w[s - c0];
            let v = &vf[s * stride + off..][..d];
            for (oj, &vj) in o.iter_mut().zip(v) {
                *oj = ws.mul_add(vj, *oj);
            }
        }
    }
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    o.iter_mut().for_each(|x| *x *= inv);
}

fma_dispatch!(
    /// One row of the row-by-row form (module doc): `scores` the row's
    /// scaled scores (one per visible position), V of position s at
    /// `s·stride + off` of `vf`, accumulated in f16 when `f16_acc`; writes
    /// the normalised output to `o`.
    fn row_by_row(
        f16_acc: bool,
        scores: &[f32],
        vf: &[f32],
        stride: usize,
        off: usize,
        o: &mut [f32]
    ) => row_by_row_body
);

#[inline(always)]
fn row_by_row_body(
    f16_acc: bool,
    scores: &[f32],
    vf: &[f32],
    stride: usize,
    off: usize,
    o: &mut [f32],
) {
    let d = o.len();
    let (mut m, mut sum) = (f32::NEG_INFINITY, 0f32);
    o.fill(0.0);
    for (s, &x) in scores.iter().enumerate() {
        let (mut ms, mut ws) = (1f32, 1f32);
        if x > m {
            ms = (m - x).exp();
            m = x;
            o.iter_mut().for_each(|y| *y *= ms);
            if f16_acc {
                round_to_f16(o);
            }
        } else {
            ws = (x - m).exp();
        }
        let v = &vf[s * stride + off..][..d];
        for (y, &vj) in o.iter_mut().zip(v) {
            *y = vj.mul_add(ws, *y);
        }
        if f16_acc {
            round_to_f16(o);
        }
        sum = sum.mul_add(ms, ws);
    }
    let inv = if sum == 0.0 { 0.0 } else { 1.0 / sum };
    o.iter_mut().for_each(|x| *x *= inv);
}
