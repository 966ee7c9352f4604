//! Tiny in-memory models for tests (here and in other modules: speculative
//! decoding, the TUI): random f32/f16 tensors bound through the same lookup
//! closure a GGUF reader provides, no file and no writer involved.

use std::collections::HashMap;

use half::f16;
use kernels::GgmlType;

use crate::gguf::{GgufWriter, Value};

use super::config::{Arch, LayerKind, ModelConfig};
use super::forward::Model;
use super::weights::WeightRef;

/// Deterministic uniform values in [-1, 1).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn uniform(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform() * scale).collect()
    }
}

pub struct Tensor {
    pub ty: GgmlType,
    pub dims: Vec<u64>,
    words: Vec<u32>,
    bytes: usize,
}

impl Tensor {
    pub fn f32(dims: &[u64], data: &[f32]) -> Tensor {
        assert_eq!(dims.iter().product::<u64>() as usize, data.len());
        Tensor {
            ty: GgmlType::F32,
            dims: dims.to_vec(),
            words: data.iter().map(|x| x.to_bits()).collect(),
            bytes: data.len() * 4,
        }
    }

    pub fn f16(dims: &[u64], data: &[f32]) -> Tensor {
        let h: Vec<u16> = data.iter().map(|x| f16::from_f32(*x).to_bits()).collect();
        let mut words = vec![0u32; h.len().div_ceil(2)];
        bytemuck::cast_slice_mut::<u32, u16>(&mut words)[..h.len()].copy_from_slice(&h);
        Tensor {
            ty: GgmlType::F16,
            dims: dims.to_vec(),
            words,
            bytes: h.len() * 2,
        }
    }

    pub fn data(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.bytes]
    }

    /// The values as f32 (what the engine sees after dequantisation).
    pub fn values(&self) -> Vec<f32> {
        match self.ty {
            GgmlType::F32 => bytemuck::cast_slice(self.data()).to_vec(),
            GgmlType::F16 => bytemuck::cast_slice::<u8, u16>(self.data())
                .iter()
                .map(|b| f16::from_bits(*b).to_f32())
                .collect(),
            t => panic!("test tensors are f32 or f16, not {t}"),
        }
    }
}

/// A tiny hybrid model: 4 layers (GDN, attention, GDN, attention) unless
/// `interval` says otherwise.
pub fn tiny_config(n_layer: usize, interval: usize) -> ModelConfig {
    let layer_kinds = (0..n_layer)
        .map(|i| {
            if (i + 1) % interval == 0 {
                LayerKind::Attention
            } else {
                LayerKind::DeltaNet
            }
        })
        .collect();
    ModelConfig {
        arch: Arch::CloverMoe,
        n_layer,
        n_layer_all: n_layer,
        context_length: 64,
        n_embd: 32,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 16,
        head_dim_v: 16,
        rms_eps: 1e-6,
        rope_base: 10000.0,
        n_rot: 8,
        rope_sections: None,
        n_expert: 6,
        n_expert_used: 2,
        n_ff_exp: 16,
        n_ff_shexp: 12,
        ssm_conv_kernel: 4,
        ssm_head_dim: 8,
        ssm_n_k_heads: 2,
        ssm_n_v_heads: 4,
        full_attention_interval: interval,
        layer_kinds,
        ssm_conv_kernel_right: 3,
        diffusion_block_size: 8,
        mask_token_id: Some(TINY_MASK),
    }
}

/// The 35B-A3B layer dimensions (docs/DESIGN.md §1.1) with `n_expert` experts
/// (8 are used per token): for benches of real per-token work at small size.
pub fn a3b_layer_config(n_layer: usize, n_expert: usize) -> ModelConfig {
    let mut c = tiny_config(n_layer, 4.min(n_layer.max(1)));
    c.n_embd = 2048;
    c.n_head = 16;
    c.n_head_kv = 2;
    c.head_dim = 256;
    c.head_dim_v = 256;
    c.rope_base = 1e7;
    c.n_rot = 64;
    c.n_expert = n_expert;
    c.n_expert_used = 8.min(n_expert);
    c.n_ff_exp = 512;
    c.n_ff_shexp = 512;
    c.ssm_head_dim = 128;
    c.ssm_n_k_heads = 16;
    c.ssm_n_v_heads = 32;
    c.context_length = 4096;
    c
}

pub const TINY_VOCAB: usize = 50;
/// The `<|mask|>` token of tiny models (the last id).
pub const TINY_MASK: u32 = TINY_VOCAB as u32 - 1;

pub struct TinyModel {
    pub cfg: ModelConfig,
    pub tensors: HashMap<String, Tensor>,
}

impl TinyModel {
    /// Random f32 weights for every tensor `cfg` needs (split gate/up).
    pub fn random(cfg: ModelConfig, seed: u64) -> TinyModel {
        let mut r = Rng::new(seed);
        let mut t = HashMap::new();
        let e = cfg.n_embd as u64;
        let v = TINY_VOCAB as u64;
        let mut put = |name: String, dims: &[u64], scale: f32, offset: f32, r: &mut Rng| {
            let n = dims.iter().product::<u64>() as usize;
            let data: Vec<f32> = r.vec(n, scale).iter().map(|x| x + offset).collect();
            t.insert(name, Tensor::f32(dims, &data));
        };
        put("token_embd.weight".into(), &[e, v], 1.0, 0.0, &mut r);
        put("output_norm.weight".into(), &[e], 0.2, 1.0, &mut r);
        put("output.weight".into(), &[e, v], 0.3, 0.0, &mut r);
        let (ne, ff, ffs) = (
            cfg.n_expert as u64,
            cfg.n_ff_exp as u64,
            cfg.n_ff_shexp as u64,
        );
        for il in 0..cfg.n_layer {
            let n = |s: &str| format!("blk.{il}.{s}");
            put(n("attn_norm.weight"), &[e], 0.2, 1.0, &mut r);
            put(n("post_attention_norm.weight"), &[e], 0.2, 1.0, &mut r);
            put(n("ffn_gate_inp.weight"), &[e, ne], 0.5, 0.0, &mut r);
            put(n("ffn_gate_exps.weight"), &[e, ff, ne], 0.3, 0.0, &mut r);
            put(n("ffn_up_exps.weight"), &[e, ff, ne], 0.3, 0.0, &mut r);
            put(n("ffn_down_exps.weight"), &[ff, e, ne], 0.3, 0.0, &mut r);
            put(n("ffn_gate_inp_shexp.weight"), &[e], 0.3, 0.0, &mut r);
            put(n("ffn_gate_shexp.weight"), &[e, ffs], 0.3, 0.0, &mut r);
            put(n("ffn_up_shexp.weight"), &[e, ffs], 0.3, 0.0, &mut r);
            put(n("ffn_down_shexp.weight"), &[ffs, e], 0.3, 0.0, &mut r);
            match cfg.layer_kinds[il] {
                LayerKind::DeltaNet => {
                    let ch = cfg.ssm_conv_channels() as u64;
                    let inner = cfg.ssm_inner() as u64;
                    let hv = cfg.ssm_n_v_heads as u64;
                    put(n("attn_qkv.weight"), &[e, ch], 0.4, 0.0, &mut r);
                    put(n("attn_gate.weight"), &[e, inner], 0.4, 0.0, &mut r);
                    put(n("ssm_beta.weight"), &[e, hv], 0.4, 0.0, &mut r);
                    put(n("ssm_alpha.weight"), &[e, hv], 0.4, 0.0, &mut r);
                    put(
                        n("ssm_conv1d.weight"),
                        &[cfg.ssm_conv_kernel as u64, ch],
                        0.5,
                        0.0,
                        &mut r,
                    );
                    put(n("ssm_dt.bias"), &[hv], 0.5, 0.0, &mut r);
                    // ssm_a = −exp(A_log): negative.
                    put(n("ssm_a"), &[hv], 0.4, -0.6, &mut r);
                    put(
                        n("ssm_norm.weight"),
                        &[cfg.ssm_head_dim as u64],
                        0.2,
                        1.0,
                        &mut r,
                    );
                    put(n("ssm_out.weight"), &[inner, e], 0.3, 0.0, &mut r);
                }
                LayerKind::Attention => {
                    let d = cfg.head_dim as u64;
                    let (nh, nkv) = (cfg.n_head as u64, cfg.n_head_kv as u64);
                    put(n("attn_q.weight"), &[e, nh * 2 * d], 0.4, 0.0, &mut r);
                    put(n("attn_k.weight"), &[e, nkv * d], 0.4, 0.0, &mut r);
                    put(n("attn_v.weight"), &[e, nkv * d], 0.4, 0.0, &mut r);
                    put(n("attn_output.weight"), &[nh * d, e], 0.3, 0.0, &mut r);
                    put(n("attn_q_norm.weight"), &[d], 0.2, 1.0, &mut r);
                    put(n("attn_k_norm.weight"), &[d], 0.2, 1.0, &mut r);
                }
            }
        }
        // The diffusion tensors (docs/DESIGN.md §1.2) from a stream of their own, so
        // the AR weights above do not depend on whether they exist.
        if cfg.arch == Arch::CloverMoe {
            let mut r = Rng::new(seed ^ 0xD1FF_D1FF);
            let ch = cfg.ssm_conv_channels() as u64;
            let hv = cfg.ssm_n_v_heads as u64;
            let kr = cfg.ssm_conv_kernel_right as u64;
            for il in 0..cfg.n_layer {
                if cfg.layer_kinds[il] != LayerKind::DeltaNet {
                    continue;
                }
                let n = |s: &str| format!("blk.{il}.{s}");
                put(n("ssm_conv1d.weight_right"), &[kr, ch], 0.5, 0.0, &mut r);
                put(n("ssm_bd_logit_scale.weight"), &[hv], 1.0, 4.0, &mut r);
                put(n("ssm_bd_history.weight"), &[hv], 0.5, 0.0, &mut r);
                put(n("ssm_bd_history.bias"), &[hv], 0.5, 0.0, &mut r);
            }
        }
        TinyModel { cfg, tensors: t }
    }

    /// Converts every tensor of at least `min_elems` elements to F16.
    pub fn to_f16(&mut self, min_elems: usize) {
        for t in self.tensors.values_mut() {
            if t.ty == GgmlType::F32 && t.dims.iter().product::<u64>() as usize >= min_elems {
                *t = Tensor::f16(&t.dims, &t.values());
            }
        }
    }

    /// The GGUF metadata that describes `cfg` (docs/DESIGN.md §1.1 keys).
    pub fn metadata(&self) -> Vec<(String, Value)> {
        let c = &self.cfg;
        let a = c.arch.name();
        let mut m = vec![("general.architecture".to_string(), Value::str(a))];
        let u = |v: usize| Value::U32(v as u32);
        for (k, v) in [
            ("block_count", u(c.n_layer_all)),
            ("context_length", u(c.context_length)),
            ("embedding_length", u(c.n_embd)),
            ("attention.head_count", u(c.n_head)),
            ("attention.head_count_kv", u(c.n_head_kv)),
            ("attention.key_length", u(c.head_dim)),
            ("attention.value_length", u(c.head_dim_v)),
            ("attention.layer_norm_rms_epsilon", Value::F32(c.rms_eps)),
            ("rope.freq_base", Value::F32(c.rope_base)),
            ("rope.dimension_count", u(c.n_rot)),
            ("expert_count", u(c.n_expert)),
            ("expert_used_count", u(c.n_expert_used)),
            ("expert_feed_forward_length", u(c.n_ff_exp)),
            ("expert_shared_feed_forward_length", u(c.n_ff_shexp)),
            ("ssm.conv_kernel", u(c.ssm_conv_kernel)),
            ("ssm.state_size", u(c.ssm_head_dim)),
            ("ssm.group_count", u(c.ssm_n_k_heads)),
            ("ssm.time_step_rank", u(c.ssm_n_v_heads)),
            ("ssm.inner_size", u(c.ssm_inner())),
            ("full_attention_interval", u(c.full_attention_interval)),
        ] {
            m.push((format!("{a}.{k}"), v));
        }
        if let Some(s) = c.rope_sections {
            m.push((format!("{a}.rope.dimension_sections"), Value::u32s(s)));
        }
        if c.arch == Arch::CloverMoe {
            m.push((
                format!("{a}.ssm.conv_kernel_right"),
                u(c.ssm_conv_kernel_right),
            ));
            m.push((
                format!("{a}.diffusion.block_size"),
                u(c.diffusion_block_size),
            ));
            if let Some(id) = c.mask_token_id {
                m.push(("tokenizer.ggml.mask_token_id".into(), Value::U32(id)));
            }
        }
        m
    }

    /// Writes the model as a GGUF file (metadata of `metadata()`, every
    /// tensor in name order).
    pub fn write_gguf<W: std::io::Write>(&self, out: W) -> std::io::Result<u64> {
        let mut w = GgufWriter::new();
        for (k, v) in self.metadata() {
            w.set(k, v);
        }
        let mut names: Vec<&String> = self.tensors.keys().collect();
        names.sort();
        for n in &names {
            let t = &self.tensors[*n];
            w.add_tensor(n.as_str(), t.ty, &t.dims);
        }
        w.write(out, |i, _, o| o.write_all(self.tensors[names[i]].data()))
    }

    /// Bytes of every tensor.
    pub fn bytes(&self) -> usize {
        self.tensors.values().map(|t| t.bytes).sum()
    }

    pub fn values(&self, name: &str) -> Vec<f32> {
        self.tensors[name].values()
    }

    pub fn set(&mut self, name: &str, t: Tensor) {
        self.tensors.insert(name.to_string(), t);
    }

    pub fn lookup(&self, name: &str) -> Option<WeightRef<'_>> {
        self.tensors.get_key_value(name).map(|(name, t)| WeightRef {
            name: name.as_str(),
            rows: kernels::Rows::File,
            ty: t.ty,
            dims: t.dims.clone(),
            data: t.data(),
        })
    }

    pub fn model(&self) -> Model<'_> {
        Model::bind(self.cfg.clone(), kernels::KernelTable::chosen(), &|n| {
            self.lookup(n)
        })
        .expect("tiny model binds")
    }
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
