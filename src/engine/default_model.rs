//! The model `clover chat`, `clover run` and `clover perplexity` use without
//! `-m`: **clover-tiny-kjv**, a 6 M-parameter `clover_moe` trained in this
//! repository on the King James Bible (`training/`, docs/DEFAULT_MODEL.md),
//! stored at `models/clover-tiny-kjv.gguf`.
//!
//! The file is compiled into the binary (`include_bytes!`), so a copied
//! binary needs nothing else. Weights are memory-mapped, so on first use the
//! bytes are written once into the user cache directory
//! (`$XDG_CACHE_HOME/clover`, else `~/.cache/clover`) under a name that carries
//! a hash of the contents (a rebuilt binary with a retrained model never
//! reuses a stale file). The write goes to a temporary file in the same
//! directory and is renamed into place, so an interrupted run never leaves a
//! broken file under the final name; a cached file whose bytes differ from
//! the binary's (damaged on disk) is rewritten before it is mapped.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::EngineError;

/// The shipped model file, as compiled into the binary.
pub static MODEL_BYTES: &[u8] = include_bytes!("../../models/clover-tiny-kjv.gguf");

/// The model's name (its `general.name`).
pub const MODEL_NAME: &str = "clover-tiny-kjv";

/// Where the default model lives and whether this call wrote it.
#[derive(Clone, Debug, PartialEq)]
pub struct DefaultModel {
    pub path: PathBuf,
    /// Written by this call (`false`: it was already there).
    pub created: bool,
    /// Seconds spent writing it (0 when it was already there).
    pub write_s: f64,
}

impl DefaultModel {
    /// The line the chat shows about it (the advice before the path, so that a
    /// narrow status line cuts the path).
    pub fn note(&self) -> String {
        format!(
            "default model: {MODEL_NAME}, a 6M-parameter clover_moe trained on the King James \
             Bible; pass -m FILE for another model; cached at {}",
            self.path.display()
        )
    }

    /// The short name for the status line.
    pub fn display_name(&self) -> String {
        format!("default: {MODEL_NAME} (trained on the KJV Bible)")
    }
}

/// The user cache directory for clover: `$XDG_CACHE_HOME/clover` when that is an
/// absolute path, else `$HOME/.cache/clover`.
pub fn cache_dir() -> Option<PathBuf> {
    let xdg = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let base = xdg.or_else(|| {
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .map(|h| h.join(".cache"))
    })?;
    Some(base.join("clover"))
}

/// FNV-1a over the bytes, eight at a time (a name tag, not a checksum).
pub fn content_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let words = bytes.chunks_exact(8);
    let tail = words.remainder();
    for w in words {
        let x = u64::from_le_bytes(w.try_into().expect("eight bytes"));
        h = (h ^ x).wrapping_mul(0x0000_0100_0000_01b3);
    }
    for &b in tail {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^ bytes.len() as u64
}

/// The cached file's name for these contents.
pub fn file_name(bytes: &[u8]) -> String {
    format!("{MODEL_NAME}-{:016x}.gguf", content_hash(bytes))
}

/// Whether `path` is a regular file holding exactly `bytes`.
fn holds(path: &Path, bytes: &[u8]) -> bool {
    use std::io::Read;
    let Ok(mut f) = fs::File::open(path) else {
        return false;
    };
    if !f
        .metadata()
        .is_ok_and(|m| m.is_file() && m.len() == bytes.len() as u64)
    {
        return false;
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < bytes.len() {
        let want = buf.len().min(bytes.len() - at);
        if f.read_exact(&mut buf[..want]).is_err() || buf[..want] != bytes[at..at + want] {
            return false;
        }
        at += want;
    }
    true
}

/// Returns the default model, writing it first when it is missing (or when
/// `rewrite` is set, e.g. after the existing file failed to load).
pub fn ensure(rewrite: bool) -> Result<DefaultModel, EngineError> {
    let dir = cache_dir().ok_or_else(|| {
        EngineError::Options(
            "no cache directory for the default model (set HOME or XDG_CACHE_HOME), \
             or pass -m FILE"
                .into(),
        )
    })?;
    ensure_in(&dir, MODEL_BYTES, rewrite)
}

/// [`ensure`] in an explicit directory, for explicit contents.
pub fn ensure_in(dir: &Path, bytes: &[u8], rewrite: bool) -> Result<DefaultModel, EngineError> {
    let name = file_name(bytes);
    let path = dir.join(&name);
    // Compared byte for byte before it is mapped (a few milliseconds): a
    // file damaged in place (same size, other bytes) is rewritten, not run.
    if !rewrite && holds(&path, bytes) {
        return Ok(DefaultModel {
            path,
            created: false,
            write_s: 0.0,
        });
    }
    let io = |what: &str, p: &Path, e: std::io::Error| {
        EngineError::Options(format!("{what} {}: {e}", p.display()))
    };
    fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
    let t0 = Instant::now();
    crate::output::write_file_atomic(&path, bytes)
        .map_err(|e| io("writing the default model to", &path, e))?;
    Ok(DefaultModel {
        path,
        created: true,
        write_s: t0.elapsed().as_secs_f64(),
    })
}
