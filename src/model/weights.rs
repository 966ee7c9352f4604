//! Per-layer weights bound zero-copy over tensor bytes (docs/DESIGN.md §1.2).
//!
//! A matrix `{in, out}` (ggml `ne` order) is `out` rows of `in` elements, each
//! row `ty.row_bytes(in)` bytes: `y[o] = Σ_i W[o][i]·x[i]`. An expert tensor
//! `{in, out, n_expert}` is `n_expert` such matrices back to back. Small vectors
//! (norms, conv taps, `ssm_a`, `ssm_dt.bias`) are dequantised once into f32.
//! `output.weight` absent → tied to `token_embd.weight`. The fused
//! `ffn_gate_up_exps {in, 2·n_ff, n_expert}` holds gate rows first, then up rows.

use kernels::plan::Layout;
use kernels::{scalar, GgmlType, Rows};
use thiserror::Error;

use super::config::{LayerKind, ModelConfig};
use super::linear::Matrix;

/// One tensor as the binder sees it: type, ggml dims, raw bytes.
#[derive(Clone, Debug)]
pub struct WeightRef<'a> {
    /// The tensor's name in the file (what an importance matrix is keyed by).
    pub name: &'a str,
    pub ty: GgmlType,
    pub dims: Vec<u64>,
    pub data: &'a [u8],
    /// Where the kernels read it: the file's rows, or the loader's copy
    /// (`kernels::repack`) alone or beside them (`load::keeps_file_rows`).
    pub rows: Rows<'a>,
}

#[derive(Debug, Error, PartialEq)]
pub enum WeightError {
    #[error("missing tensor {0}")]
    Missing(String),
    #[error("tensor {name} has shape {found:?}, expected {expected:?}")]
    Shape {
        name: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },
    #[error("tensor {name}: type {ty} cannot be used as a weight")]
    Type { name: String, ty: GgmlType },
    #[error("tensor {name}: {reason}")]
    Data { name: String, reason: String },
}

/// A stack of `n_expert` matrices of `n_out x n_in`.
#[derive(Clone, Copy, Debug)]
pub struct Experts<'a> {
    pub ty: GgmlType,
    pub n_in: usize,
    pub n_out: usize,
    pub n_expert: usize,
    /// The stack's tensor name.
    pub name: &'a str,
    data: &'a [u8],
    packed: Option<&'a [u8]>,
}

impl<'a> Experts<'a> {
    /// The kernels' view of the whole stack.
    pub fn q(&self) -> kernels::QExperts<'a> {
        let q = kernels::QExperts::new(self.ty, self.n_in, self.n_out, self.n_expert, self.data)
            .expect("expert stack checked by the binder");
        match self.packed {
            Some(p) => q.with_packed(p).expect("repacked by the loader"),
            None => q,
        }
    }

    /// Expert `e` as a matrix.
    pub fn expert(&self, e: usize) -> Matrix<'a> {
        let rb = self.ty.row_bytes(self.n_in as u64).unwrap_or(0) as usize;
        let size = rb * self.n_out;
        let m = Matrix::new_unchecked(
            self.ty,
            self.n_in,
            self.n_out,
            &self.data[e * size..(e + 1) * size],
        );
        let one = kernels::repack::packed_bytes(self.ty, self.n_in, self.n_out);
        let copy = self.packed.map(|p| &p[e * one..(e + 1) * one]);
        m.as_expert()
            .named(self.name)
            .with_rows(Rows::of(Layout::Packed, copy))
    }
}

/// Routed expert gate and up projections, separate or fused.
#[derive(Clone, Copy, Debug)]
pub enum GateUp<'a> {
    Split {
        gate: Experts<'a>,
        up: Experts<'a>,
    },
    /// Per expert: `n_ff` gate rows, then `n_ff` up rows.
    Fused(Experts<'a>),
}

#[derive(Debug)]
pub struct FfnWeights<'a> {
    /// `post_attention_norm` (the pre-FFN norm; +1 already baked in).
    pub norm: Vec<f32>,
    /// Router `{n_embd, n_expert}`.
    pub router: Matrix<'a>,
    pub gate_up: GateUp<'a>,
    /// `{n_ff, n_embd, n_expert}`.
    pub down: Experts<'a>,
    /// `ffn_gate_inp_shexp {n_embd}` as a 1-row matrix.
    pub shexp_gate_inp: Matrix<'a>,
    pub shexp_gate: Matrix<'a>,
    pub shexp_up: Matrix<'a>,
    pub shexp_down: Matrix<'a>,
}

#[derive(Debug)]
pub struct DeltaNetWeights<'a> {
    /// `{n_embd, conv_channels}`: q, k, v channels.
    pub qkv: Matrix<'a>,
    /// z, `{n_embd, inner}`.
    pub gate: Matrix<'a>,
    pub beta: Matrix<'a>,
    pub alpha: Matrix<'a>,
    /// `[channel][tap]`, tap `kernel-1` multiplies the current token.
    pub conv: Vec<f32>,
    /// The same taps as `[tap][channel]` (`ops::by_tap`), for
    /// contiguous loads.
    pub conv_t: Vec<f32>,
    pub dt_bias: Vec<f32>,
    /// −exp(A_log), negative.
    pub a: Vec<f32>,
    /// `ssm_norm {head_dim}` (no +1 baked in, used as is).
    pub norm: Vec<f32>,
    pub out: Matrix<'a>,
    /// The block-diffusion extras (docs/DESIGN.md §3), `clover_moe` files only.
    pub diffusion: Option<DiffusionWeights>,
}

/// Per GDN layer, the four tensors Clover adds for the diffusion path.
#[derive(Debug)]
pub struct DiffusionWeights {
    /// `ssm_conv1d.weight_right {K_r, channels}` as `[channel][tap]`; tap j
    /// multiplies the token j+1 steps ahead.
    pub conv_right: Vec<f32>,
    /// The same as `[tap][channel]` (`ops::by_tap`).
    pub conv_right_t: Vec<f32>,
    /// Right taps per channel (`K_r`).
    pub k_right: usize,
    /// `ssm_bd_logit_scale.weight {n_v}`: block-softmax logit scale s_h.
    pub logit_scale: Vec<f32>,
    /// `ssm_bd_history.weight / .bias {n_v}`: λ = σ(w·g + b).
    pub history_w: Vec<f32>,
    pub history_b: Vec<f32>,
}

#[derive(Debug)]
pub struct AttentionWeights<'a> {
    /// `{n_embd, n_head·2·head_dim}`: head h owns rows h·2d … (query d, gate d).
    pub q: Matrix<'a>,
    pub k: Matrix<'a>,
    pub v: Matrix<'a>,
    pub o: Matrix<'a>,
    pub q_norm: Vec<f32>,
    pub k_norm: Vec<f32>,
}

// One per layer, bound once: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum MixerWeights<'a> {
    DeltaNet(DeltaNetWeights<'a>),
    Attention(AttentionWeights<'a>),
}

#[derive(Debug)]
pub struct LayerWeights<'a> {
    pub attn_norm: Vec<f32>,
    pub mixer: MixerWeights<'a>,
    pub ffn: FfnWeights<'a>,
}

/// The multi-token-prediction block (docs/DESIGN.md §2.7): the
/// `blk.N.nextn.*` tensors and block N's gated attention and MoE, N being the
/// trunk's layer count. It runs after the trunk and shares its embedding and
/// output head.
#[derive(Debug)]
pub struct MtpWeights<'a> {
    /// `{2·n_embd, n_embd}` over `[enorm(embedding) ; hnorm(hidden)]`.
    pub eh_proj: Matrix<'a>,
    pub enorm: Vec<f32>,
    pub hnorm: Vec<f32>,
    /// The norm before the output head (the trunk's `output_norm`'s place).
    pub shared_head_norm: Vec<f32>,
    /// Block N: `attn_norm`, gated attention, `post_attention_norm`, MoE.
    pub layer: LayerWeights<'a>,
}

#[derive(Debug)]
pub struct Weights<'a> {
    pub token_embd: Matrix<'a>,
    pub output_norm: Vec<f32>,
    pub output: Matrix<'a>,
    pub layers: Vec<LayerWeights<'a>>,
    /// The MTP block, when the file has a whole one (`nextn_predict_layers`).
    pub mtp: Option<MtpWeights<'a>>,
    /// Why the file's MTP block cannot run (a tensor missing or misshapen):
    /// the trunk still loads, and `--spec-type mtp` reports this.
    pub mtp_unusable: Option<WeightError>,
    pub n_vocab: usize,
}

/// The dims without trailing 1s (at least one kept): what ggml's
/// `ggml_n_dims` counts, and so how llama-quantize writes a shape.
pub fn trim_unit_dims(dims: &[u64]) -> &[u64] {
    let n = dims.iter().rposition(|&d| d != 1).map_or(1, |i| i + 1);
    &dims[..n.min(dims.len())]
}

/// Shapes compared as llama.cpp's loader compares them: dimension by
/// dimension with missing ones taken as 1, so a converter's `{n, 1}` is the
/// `{n}` the model expects.
pub fn same_shape(found: &[u64], expected: &[u64]) -> bool {
    trim_unit_dims(found) == trim_unit_dims(expected)
}

fn usable_weight_type(ty: GgmlType) -> bool {
    !matches!(ty, GgmlType::Q8_1 | GgmlType::Q8_K)
}

/// Looks tensors up and checks them.
struct Binder<'f, 'a> {
    lookup: &'f dyn Fn(&str) -> Option<WeightRef<'a>>,
}

impl<'a> Binder<'_, 'a> {
    fn get(&self, name: &str, expected: &[u64]) -> Result<WeightRef<'a>, WeightError> {
        let w = (self.lookup)(name).ok_or_else(|| WeightError::Missing(name.to_string()))?;
        self.check(name, w, expected)
    }

    fn check(
        &self,
        name: &str,
        w: WeightRef<'a>,
        expected: &[u64],
    ) -> Result<WeightRef<'a>, WeightError> {
        if !same_shape(&w.dims, expected) {
            return Err(WeightError::Shape {
                name: name.to_string(),
                expected: expected.to_vec(),
                found: w.dims.clone(),
            });
        }
        if !usable_weight_type(w.ty) {
            return Err(WeightError::Type {
                name: name.to_string(),
                ty: w.ty,
            });
        }
        let data_err = |reason: String| WeightError::Data {
            name: name.to_string(),
            reason,
        };
        let row = w.ty.row_bytes(expected[0]).ok_or_else(|| {
            data_err(format!(
                "row of {} elements is not a whole number of {} blocks",
                expected[0], w.ty
            ))
        })?;
        let total = expected[1..]
            .iter()
            .try_fold(row, |acc, d| acc.checked_mul(*d))
            .ok_or_else(|| data_err("size overflows".into()))?;
        if (w.data.len() as u64) < total {
            return Err(data_err(format!(
                "{} bytes of data, {total} needed",
                w.data.len()
            )));
        }
        let align = if w.ty == GgmlType::F32 { 4 } else { 2 };
        if !(w.data.as_ptr() as usize).is_multiple_of(align) {
            return Err(data_err(format!("data is not {align}-byte aligned")));
        }
        Ok(WeightRef {
            data: &w.data[..total as usize],
            ..w
        })
    }

    fn matrix(&self, name: &str, n_in: usize, n_out: usize) -> Result<Matrix<'a>, WeightError> {
        let w = self.get(name, &[n_in as u64, n_out as u64])?;
        Ok(Matrix::new_unchecked(w.ty, n_in, n_out, w.data)
            .named(w.name)
            .with_rows(w.rows))
    }

    /// A `{n}` vector bound as a 1-row matrix.
    fn row_matrix(&self, name: &str, n_in: usize) -> Result<Matrix<'a>, WeightError> {
        let w = self.get(name, &[n_in as u64])?;
        Ok(Matrix::new_unchecked(w.ty, n_in, 1, w.data).named(w.name))
    }

    fn experts(
        &self,
        name: &str,
        n_in: usize,
        n_out: usize,
        n_expert: usize,
    ) -> Result<Experts<'a>, WeightError> {
        let w = self.get(name, &[n_in as u64, n_out as u64, n_expert as u64])?;
        Ok(Experts {
            ty: w.ty,
            n_in,
            n_out,
            n_expert,
            name: w.name,
            data: w.data,
            packed: w.rows.copy(),
        })
    }

    /// A small tensor of `dims`, dequantised to f32.
    fn vector(&self, name: &str, dims: &[u64]) -> Result<Vec<f32>, WeightError> {
        let w = self.get(name, dims)?;
        let n: u64 = dims.iter().product();
        if !matches!(w.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16) {
            return Err(WeightError::Type {
                name: name.to_string(),
                ty: w.ty,
            });
        }
        // Copy into aligned storage first: the dequantiser requires alignment.
        let mut aligned = vec![0u32; w.data.len().div_ceil(4)];
        bytemuck::cast_slice_mut::<u32, u8>(&mut aligned)[..w.data.len()].copy_from_slice(w.data);
        let mut out = vec![0f32; n as usize];
        scalar::dequantize_row(
            w.ty,
            &bytemuck::cast_slice::<u32, u8>(&aligned)[..w.data.len()],
            &mut out,
        );
        Ok(out)
    }
}

impl<'a> Weights<'a> {
    /// Binds every tensor of the executed layers, checking shapes and types.
    pub fn bind(
        cfg: &ModelConfig,
        lookup: &dyn Fn(&str) -> Option<WeightRef<'a>>,
    ) -> Result<Weights<'a>, WeightError> {
        let b = Binder { lookup };
        let e = cfg.n_embd;
        let embd_name = "token_embd.weight";
        let embd = lookup(embd_name).ok_or_else(|| WeightError::Missing(embd_name.into()))?;
        let n_vocab = match trim_unit_dims(&embd.dims) {
            [d0, v] if *d0 == e as u64 && *v >= 1 && *v <= (1 << 24) => *v as usize,
            _ => {
                return Err(WeightError::Shape {
                    name: embd_name.into(),
                    expected: vec![e as u64, 0],
                    found: embd.dims.clone(),
                })
            }
        };
        let token_embd = b.matrix(embd_name, e, n_vocab)?;
        let output = if lookup("output.weight").is_some() {
            b.matrix("output.weight", e, n_vocab)?
        } else {
            token_embd
        };
        let output_norm = b.vector("output_norm.weight", &[e as u64])?;
        let layers = (0..cfg.n_layer)
            .map(|il| bind_layer(&b, cfg, il, cfg.layer_kinds[il]))
            .collect::<Result<Vec<_>, _>>()?;
        let (mtp, mtp_unusable) = match bind_mtp(&b, cfg) {
            Ok(m) => (m, None),
            Err(e) => (None, Some(e)),
        };
        Ok(Weights {
            token_embd,
            output_norm,
            output,
            layers,
            mtp,
            mtp_unusable,
            n_vocab,
        })
    }
}

/// The MTP block after the trunk's `n_layer` blocks: all of it when
/// `eh_proj` is there (a missing or misshapen tensor is then an error
/// naming it), none otherwise.
fn bind_mtp<'a>(
    b: &Binder<'_, 'a>,
    cfg: &ModelConfig,
) -> Result<Option<MtpWeights<'a>>, WeightError> {
    let il = cfg.n_layer;
    let n = |s: &str| format!("blk.{il}.nextn.{s}");
    if (b.lookup)(&n("eh_proj.weight")).is_none() {
        return Ok(None);
    }
    let e = cfg.n_embd;
    let norm = |s: &str| b.vector(&n(s), &[e as u64]);
    Ok(Some(MtpWeights {
        eh_proj: b.matrix(&n("eh_proj.weight"), 2 * e, e)?,
        enorm: norm("enorm.weight")?,
        hnorm: norm("hnorm.weight")?,
        shared_head_norm: norm("shared_head_norm.weight")?,
        layer: bind_layer(b, cfg, il, LayerKind::Attention)?,
    }))
}

fn bind_layer<'a>(
    b: &Binder<'_, 'a>,
    cfg: &ModelConfig,
    il: usize,
    kind: LayerKind,
) -> Result<LayerWeights<'a>, WeightError> {
    let n = |s: &str| format!("blk.{il}.{s}");
    let e = cfg.n_embd;
    let attn_norm = b.vector(&n("attn_norm.weight"), &[e as u64])?;
    let mixer = match kind {
        LayerKind::DeltaNet => {
            let ch = cfg.ssm_conv_channels();
            let inner = cfg.ssm_inner();
            let hv = cfg.ssm_n_v_heads as u64;
            let conv = b.vector(
                &n("ssm_conv1d.weight"),
                &[cfg.ssm_conv_kernel as u64, ch as u64],
            )?;
            let conv_t = super::ops::by_tap(&conv, cfg.ssm_conv_kernel, ch);
            MixerWeights::DeltaNet(DeltaNetWeights {
                qkv: b.matrix(&n("attn_qkv.weight"), e, ch)?,
                gate: b.matrix(&n("attn_gate.weight"), e, inner)?,
                beta: b.matrix(&n("ssm_beta.weight"), e, cfg.ssm_n_v_heads)?,
                alpha: b.matrix(&n("ssm_alpha.weight"), e, cfg.ssm_n_v_heads)?,
                conv,
                conv_t,
                dt_bias: b.vector(&n("ssm_dt.bias"), &[hv])?,
                a: b.vector(&n("ssm_a"), &[hv])?,
                norm: b.vector(&n("ssm_norm.weight"), &[cfg.ssm_head_dim as u64])?,
                out: b.matrix(&n("ssm_out.weight"), inner, e)?,
                diffusion: bind_diffusion(b, cfg, il)?,
            })
        }
        LayerKind::Attention => {
            let d = cfg.head_dim;
            MixerWeights::Attention(AttentionWeights {
                q: b.matrix(&n("attn_q.weight"), e, cfg.n_head * 2 * d)?,
                k: b.matrix(&n("attn_k.weight"), e, cfg.n_head_kv * d)?,
                v: b.matrix(&n("attn_v.weight"), e, cfg.n_head_kv * d)?,
                o: b.matrix(&n("attn_output.weight"), cfg.n_head * d, e)?,
                q_norm: b.vector(&n("attn_q_norm.weight"), &[d as u64])?,
                k_norm: b.vector(&n("attn_k_norm.weight"), &[d as u64])?,
            })
        }
    };
    let (ff, ne) = (cfg.n_ff_exp, cfg.n_expert);
    let fused = n("ffn_gate_up_exps.weight");
    let gate_up = if (b.lookup)(&fused).is_some() {
        GateUp::Fused(b.experts(&fused, e, 2 * ff, ne)?)
    } else {
        GateUp::Split {
            gate: b.experts(&n("ffn_gate_exps.weight"), e, ff, ne)?,
            up: b.experts(&n("ffn_up_exps.weight"), e, ff, ne)?,
        }
    };
    let ffn = FfnWeights {
        norm: b.vector(&n("post_attention_norm.weight"), &[e as u64])?,
        router: b.matrix(&n("ffn_gate_inp.weight"), e, ne)?,
        gate_up,
        down: b.experts(&n("ffn_down_exps.weight"), ff, e, ne)?,
        shexp_gate_inp: b.row_matrix(&n("ffn_gate_inp_shexp.weight"), e)?,
        shexp_gate: b.matrix(&n("ffn_gate_shexp.weight"), e, cfg.n_ff_shexp)?,
        shexp_up: b.matrix(&n("ffn_up_shexp.weight"), e, cfg.n_ff_shexp)?,
        shexp_down: b.matrix(&n("ffn_down_shexp.weight"), cfg.n_ff_shexp, e)?,
    };
    Ok(LayerWeights {
        attn_norm,
        mixer,
        ffn,
    })
}

/// The diffusion tensors of GDN layer `il`: all four or none (`qwen35moe`
/// files have none; a `clover_moe` file with only some is an error). `K_r`
/// comes from `ssm.conv_kernel_right`, or from the tensor when that is 0.
fn bind_diffusion(
    b: &Binder<'_, '_>,
    cfg: &ModelConfig,
    il: usize,
) -> Result<Option<DiffusionWeights>, WeightError> {
    let n = |s: &str| format!("blk.{il}.{s}");
    let right = n("ssm_conv1d.weight_right");
    let names = [
        right.clone(),
        n("ssm_bd_logit_scale.weight"),
        n("ssm_bd_history.weight"),
        n("ssm_bd_history.bias"),
    ];
    let present: Vec<bool> = names.iter().map(|s| (b.lookup)(s).is_some()).collect();
    if present.iter().all(|p| !p) {
        return Ok(None);
    }
    if let Some(i) = present.iter().position(|p| !p) {
        return Err(WeightError::Missing(names[i].clone()));
    }
    let ch = cfg.ssm_conv_channels() as u64;
    let k_right = match cfg.ssm_conv_kernel_right {
        0 => match (b.lookup)(&right).map(|w| w.dims) {
            Some(d) if d.len() >= 2 && same_shape(&d, &[d[0], ch]) && d[0] >= 1 && d[0] <= 64 => {
                d[0] as usize
            }
            Some(d) => {
                return Err(WeightError::Shape {
                    name: right,
                    expected: vec![3, ch],
                    found: d,
                })
            }
            None => unreachable!("presence checked above"),
        },
        k => k,
    };
    let hv = cfg.ssm_n_v_heads as u64;
    let conv_right = b.vector(&right, &[k_right as u64, ch])?;
    let conv_right_t = super::ops::by_tap(&conv_right, k_right, ch as usize);
    Ok(Some(DiffusionWeights {
        conv_right,
        conv_right_t,
        k_right,
        logit_scale: b.vector(&names[1], &[hv])?,
        history_w: b.vector(&names[2], &[hv])?,
        history_b: b.vector(&names[3], &[hv])?,
    }))
}

#[cfg(test)]
#[path = "weights_tests.rs"]
mod tests;
