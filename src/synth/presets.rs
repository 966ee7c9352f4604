//! Model shapes: the two architectures and the four size presets.
//!
//! `full` is the Clover-35B-A3B / Qwen3.5-35B-A3B geometry of docs/DESIGN.md §1; the
//! smaller presets keep its ratios where the size allows (GQA 8:1 or 4:1, two
//! GDN value heads per key head, rope on a quarter of the head, the rope
//! sections scaled with it, one full-attention layer in four).

use std::fmt;
use std::str::FromStr;

/// The GGUF architecture written to `general.architecture`.
pub use crate::model::Arch;

/// A named size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    Tiny,
    Small,
    A3b4l,
    Full,
}

impl Preset {
    pub const ALL: [Preset; 4] = [Preset::Tiny, Preset::Small, Preset::A3b4l, Preset::Full];

    pub fn name(self) -> &'static str {
        match self {
            Preset::Tiny => "tiny",
            Preset::Small => "small",
            Preset::A3b4l => "a3b-4l",
            Preset::Full => "full",
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Preset {
    type Err = String;
    fn from_str(s: &str) -> Result<Preset, String> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown preset '{s}' (expected tiny, small, a3b-4l or full)"))
    }
}

/// Every hyperparameter a synthetic file needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dims {
    pub n_layer: usize,
    pub context_length: u32,
    pub d_model: usize,
    /// Full-attention query heads and KV heads.
    pub n_head: usize,
    pub n_head_kv: usize,
    /// Full-attention head dim (key_length = value_length).
    pub head_dim: usize,
    pub rope_dims: usize,
    pub rope_sections: [i32; 4],
    pub n_expert: usize,
    pub n_expert_used: usize,
    pub ff_exp: usize,
    pub ff_shexp: usize,
    /// Left (causal) conv taps, right conv taps (Clover only).
    pub conv_left: usize,
    pub conv_right: usize,
    /// GDN head dim (state_size), key heads (group_count), value heads (time_step_rank).
    pub ssm_state: usize,
    pub ssm_groups: usize,
    pub ssm_v_heads: usize,
    pub full_attention_interval: usize,
    pub vocab: usize,
    pub diffusion_block_size: u32,
}

impl Dims {
    pub fn for_preset(preset: Preset, arch: Arch) -> Dims {
        let real = Dims {
            n_layer: 40,
            context_length: if arch.is_clover() { 131072 } else { 262144 },
            d_model: 2048,
            n_head: 16,
            n_head_kv: 2,
            head_dim: 256,
            rope_dims: 64,
            rope_sections: [11, 11, 10, 0],
            n_expert: 256,
            n_expert_used: 8,
            ff_exp: 512,
            ff_shexp: 512,
            conv_left: 4,
            conv_right: 3,
            ssm_state: 128,
            ssm_groups: 16,
            ssm_v_heads: 32,
            full_attention_interval: 4,
            vocab: 248320,
            diffusion_block_size: 16,
        };
        match preset {
            Preset::Full => real,
            Preset::A3b4l => Dims { n_layer: 4, ..real },
            Preset::Small => Dims {
                n_layer: 8,
                context_length: 4096,
                d_model: 256,
                n_head: 8,
                n_head_kv: 1,
                head_dim: 64,
                rope_dims: 16,
                rope_sections: [3, 3, 2, 0],
                n_expert: 16,
                n_expert_used: 4,
                ff_exp: 256,
                ff_shexp: 256,
                ssm_state: 64,
                ssm_groups: 4,
                ssm_v_heads: 8,
                vocab: 4096,
                ..real
            },
            Preset::Tiny => Dims {
                n_layer: 4,
                context_length: 2048,
                d_model: 64,
                n_head: 4,
                n_head_kv: 1,
                head_dim: 16,
                rope_dims: 4,
                rope_sections: [1, 1, 0, 0],
                n_expert: 8,
                n_expert_used: 2,
                ff_exp: 16,
                ff_shexp: 16,
                ssm_state: 16,
                ssm_groups: 2,
                ssm_v_heads: 4,
                vocab: 448,
                ..real
            },
        }
    }

    /// Layer `i` is full attention iff (i+1) % interval == 0.
    pub fn is_attention(&self, layer: usize) -> bool {
        (layer + 1).is_multiple_of(self.full_attention_interval)
    }

    pub fn n_attention_layers(&self) -> usize {
        (0..self.n_layer).filter(|&i| self.is_attention(i)).count()
    }

    /// GDN value width: value heads × head dim.
    pub fn ssm_inner(&self) -> usize {
        self.ssm_v_heads * self.ssm_state
    }

    /// GDN conv channels: q and k (key heads × head dim each) then v.
    pub fn conv_channels(&self) -> usize {
        2 * self.ssm_groups * self.ssm_state + self.ssm_inner()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ops::rope_pairs_rotated;

    #[test]
    fn every_preset_writes_sections_that_rotate_every_rope_pair() {
        // What llama.cpp computes then equals plain NeoX rope (docs/DESIGN.md §2.4),
        // which the stored parity fixtures were made with.
        for preset in Preset::ALL {
            for arch in [Arch::CloverMoe, Arch::Qwen35Moe] {
                let d = Dims::for_preset(preset, arch);
                let s = d.rope_sections.map(|x| x as u32);
                let pairs = rope_pairs_rotated(d.rope_dims / 2, Some(s));
                assert!(pairs.iter().all(|&r| r), "{preset} {s:?}: {pairs:?}");
            }
        }
    }
}
