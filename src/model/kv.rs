//! KV cache of the full-attention layers (docs/DESIGN.md §2.5).
//!
//! Per attention layer: K and V, each `n_ctx` rows of `n_head_kv · head_dim`
//! elements stored in the cache type (F32, F16, BF16 or Q8_0; `-ctk/-ctv`).
//! Row `p` holds position `p`; a KV head's slice is `row_bytes(head_dim)`
//! bytes at offset `kvh · row_bytes(head_dim)`. Rolling back is `truncate`.

use kernels::{GgmlType, KernelTable};

use super::StateError;

#[derive(Debug)]
struct KvLayer {
    k: Vec<u64>,
    v: Vec<u64>,
}

#[derive(Debug)]
pub struct KvCache {
    pub ty_k: GgmlType,
    pub ty_v: GgmlType,
    n_ctx: usize,
    n_head_kv: usize,
    head_dim: usize,
    head_bytes_k: usize,
    head_bytes_v: usize,
    layers: Vec<KvLayer>,
    len: usize,
    /// Attention over this cache in llama.cpp's flash-attention arithmetic
    /// (`-fa on`; see `attention/flash.rs`), for commands that print
    /// llama's figures. Off everywhere else.
    pub flash: bool,
}

fn check_type(ty: GgmlType, head_dim: usize) -> Result<usize, StateError> {
    if !matches!(
        ty,
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 | GgmlType::Q8_0
    ) {
        return Err(StateError::CacheType(ty));
    }
    ty.row_bytes(head_dim as u64)
        .map(|b| b as usize)
        .ok_or(StateError::CacheType(ty))
}

impl KvCache {
    pub fn new(
        n_layers: usize,
        n_ctx: usize,
        n_head_kv: usize,
        head_dim: usize,
        ty_k: GgmlType,
        ty_v: GgmlType,
    ) -> Result<KvCache, StateError> {
        let head_bytes_k = check_type(ty_k, head_dim)?;
        let head_bytes_v = check_type(ty_v, head_dim)?;
        let words = |hb: usize| (n_ctx * n_head_kv * hb).div_ceil(8);
        let layers = (0..n_layers)
            .map(|_| KvLayer {
                k: vec![0; words(head_bytes_k)],
                v: vec![0; words(head_bytes_v)],
            })
            .collect();
        Ok(KvCache {
            ty_k,
            ty_v,
            n_ctx,
            n_head_kv,
            head_dim,
            head_bytes_k,
            head_bytes_v,
            layers,
            len: 0,
            flash: false,
        })
    }

    /// `n_layers` layers of the model's KV heads, sized and typed as `opts`
    /// asks.
    pub(crate) fn for_state(
        n_layers: usize,
        cfg: &super::ModelConfig,
        opts: &super::StateOptions,
    ) -> Result<KvCache, StateError> {
        KvCache::new(
            n_layers,
            opts.n_ctx,
            cfg.n_head_kv,
            cfg.head_dim,
            opts.type_k,
            opts.type_v,
        )
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// Keeps positions `0..n` (no-op when `n >= len`).
    pub fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n);
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    pub(crate) fn set_len(&mut self, n: usize) {
        debug_assert!(n <= self.n_ctx);
        self.len = n;
    }

    /// Stores the K and V rows (`n_head_kv · head_dim` f32 each) of position `pos`.
    pub fn write(&mut self, kt: &KernelTable, layer: usize, pos: usize, k: &[f32], v: &[f32]) {
        let (hd, nkv) = (self.head_dim, self.n_head_kv);
        let (hbk, hbv) = (self.head_bytes_k, self.head_bytes_v);
        let (qk, qv) = (kt.quantize(self.ty_k), kt.quantize(self.ty_v));
        let l = &mut self.layers[layer];
        let kb: &mut [u8] = bytemuck::cast_slice_mut(&mut l.k);
        let krow = &mut kb[pos * nkv * hbk..(pos + 1) * nkv * hbk];
        for (src, dst) in k.chunks_exact(hd).zip(krow.chunks_exact_mut(hbk)) {
            qk(src, dst);
        }
        let vb: &mut [u8] = bytemuck::cast_slice_mut(&mut l.v);
        let vrow = &mut vb[pos * nkv * hbv..(pos + 1) * nkv * hbv];
        for (src, dst) in v.chunks_exact(hd).zip(vrow.chunks_exact_mut(hbv)) {
            qv(src, dst);
        }
    }

    /// K of KV head `kvh` at `pos`, in `ty_k`.
    #[inline]
    pub fn k_head(&self, layer: usize, pos: usize, kvh: usize) -> &[u8] {
        let b: &[u8] = bytemuck::cast_slice(&self.layers[layer].k);
        let off = (pos * self.n_head_kv + kvh) * self.head_bytes_k;
        &b[off..off + self.head_bytes_k]
    }

    /// V of KV head `kvh` at `pos`, in `ty_v`.
    #[inline]
    pub fn v_head(&self, layer: usize, pos: usize, kvh: usize) -> &[u8] {
        let b: &[u8] = bytemuck::cast_slice(&self.layers[layer].v);
        let off = (pos * self.n_head_kv + kvh) * self.head_bytes_v;
        &b[off..off + self.head_bytes_v]
    }

    /// Bytes held by the cache at full context.
    pub fn bytes(&self) -> usize {
        self.layers.len() * self.n_ctx * self.n_head_kv * (self.head_bytes_k + self.head_bytes_v)
    }
}
