//! The model `clover chat` uses without `-m`: a random-weight synthetic
//! `clover_moe` file (`small` preset, recipe Q8_0, fixed seed), written once into
//! the user cache directory (`$XDG_CACHE_HOME/clover`, else `~/.cache/clover`).
//!
//! It is written to a temporary file in the same directory and renamed into place,
//! so an interrupted run never leaves a broken file under the final name.
//!
//! `CLOVER_DEFAULT_MODEL_PRESET` (hidden, for tests) picks another preset.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::synth::{self, Arch, Preset, Recipe, SynthOptions};

use super::EngineError;

/// Seed of the default model's weights.
pub const DEFAULT_SEED: u64 = 35;
/// Overrides the preset (test speed only).
pub const PRESET_ENV: &str = "CLOVER_DEFAULT_MODEL_PRESET";

/// Where the default model lives and whether this call wrote it.
#[derive(Clone, Debug, PartialEq)]
pub struct DefaultModel {
    pub path: PathBuf,
    pub preset: Preset,
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
            "default model: random-weight synthetic clover_moe ({}); pass -m FILE for a \
             real model; generated at {}",
            self.preset,
            self.path.display()
        )
    }

    /// The short name for the status line.
    pub fn display_name(&self) -> String {
        format!(
            "default: synthetic clover_moe {} (random weights)",
            self.preset
        )
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

/// The preset in use (`small` unless the test variable says otherwise).
pub fn preset() -> Result<Preset, EngineError> {
    match std::env::var(PRESET_ENV) {
        Ok(s) if !s.is_empty() => s
            .parse()
            .map_err(|e: String| EngineError::Options(format!("{PRESET_ENV}: {e}"))),
        _ => Ok(Preset::Small),
    }
}

/// The default model's file name for a preset.
pub fn file_name(preset: Preset) -> String {
    format!("synthetic-clover_moe-{preset}-q8_0-seed{DEFAULT_SEED}.gguf")
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
    ensure_in(&dir, preset()?, rewrite)
}

/// [`ensure`] in an explicit directory.
pub fn ensure_in(dir: &Path, preset: Preset, rewrite: bool) -> Result<DefaultModel, EngineError> {
    let path = dir.join(file_name(preset));
    if path.is_file() && !rewrite {
        return Ok(DefaultModel {
            path,
            preset,
            created: false,
            write_s: 0.0,
        });
    }
    let io = |what: &str, p: &Path, e: std::io::Error| {
        EngineError::Options(format!("{what} {}: {e}", p.display()))
    };
    fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
    let plan = synth::plan(SynthOptions {
        arch: Arch::CloverMoe,
        preset,
        recipe: Recipe::Q8_0,
        seed: DEFAULT_SEED,
    })
    .map_err(|e| EngineError::Options(format!("default model: {e}")))?;
    let tmp = dir.join(format!(".{}.{}.tmp", file_name(preset), std::process::id()));
    let t0 = Instant::now();
    if let Err(e) = plan.write(&tmp, None) {
        let _ = fs::remove_file(&tmp);
        return Err(EngineError::Options(format!("default model: {e}")));
    }
    if let Err(e) = fs::rename(&tmp, &path) {
        let _ = fs::remove_file(&tmp);
        return Err(io("renaming the default model to", &path, e));
    }
    Ok(DefaultModel {
        path,
        preset,
        created: true,
        write_s: t0.elapsed().as_secs_f64(),
    })
}
