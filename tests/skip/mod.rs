//! How an integration test reports a check it skipped because an outside
//! oracle (llama.cpp, gguf-py, llama.cpp's vocab files) is missing: one line on
//! stderr that a plain `cargo test` shows.
//!
//! libtest captures what `eprintln!` prints from a passing test, so a skip
//! reported that way only shows with `--nocapture`. The capture covers the
//! print macros, not the stderr handle, so this writes to the handle.

use std::io::Write;

/// Prints `SKIPPED <test>: <what is missing>; <how to get it>` as one line.
pub fn skipped(test: &str, missing: &str, how: &str) {
    let line = format!("SKIPPED {test}: {missing}; {how}\n");
    // One write, so that tests running in parallel do not interleave lines.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}
