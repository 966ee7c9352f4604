//! Debug dumps of intermediate tensors, for layer-by-layer comparisons with
//! llama.cpp (`scripts/oracle/llama_logits.c dump` writes the same names).
//!
//! With `CLOVER_DUMP_DIR` set, `put("attn_norm", il, x)` writes `x` as raw
//! little-endian f32 to `DIR/attn_norm-IL.f32` (layer −1: no suffix), using
//! ggml's graph names. Unset (the normal case) it costs one cached check.

use std::path::PathBuf;
use std::sync::OnceLock;

fn dir() -> Option<&'static PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| std::env::var_os("CLOVER_DUMP_DIR").map(PathBuf::from))
        .as_ref()
}

/// Whether dumps are on.
#[inline]
pub fn on() -> bool {
    dir().is_some()
}

/// Writes `data` under ggml's name for it (`name-il`, or `name` for `il < 0`).
pub fn put(name: &str, il: isize, data: &[f32]) {
    let Some(d) = dir() else { return };
    let file = if il < 0 {
        format!("{name}.f32")
    } else {
        format!("{name}-{il}.f32")
    };
    let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    if let Err(e) = crate::output::write_file_atomic(&d.join(file), &bytes) {
        eprintln!("CLOVER_DUMP_DIR: {e}");
    }
}

static LAYER: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(-1);

/// Sets the layer that `here` names (the forward pass calls it per block).
pub fn set_layer(il: usize) {
    if on() {
        LAYER.store(il as isize, std::sync::atomic::Ordering::Relaxed);
    }
}

/// `put` under the layer last given to `set_layer`.
pub fn here(name: &str, data: &[f32]) {
    if on() {
        put(name, LAYER.load(std::sync::atomic::Ordering::Relaxed), data);
    }
}
