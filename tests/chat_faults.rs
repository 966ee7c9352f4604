//! `clover chat` never dies of its input: a full context, invalid UTF-8, a turn too
//! long for the context, a flag the model cannot honour, a saved conversation to
//! continue. Line mode (stdout is a pipe) on `tiny` synthetic files of both
//! architectures; the TUI side of these faults is in `tui_e2e.rs`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};

use clover::synth::{self, Arch, Preset, Recipe, SynthOptions};

fn tiny(arch: Arch) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    static LOCK: Mutex<()> = Mutex::new(());
    let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap());
    let path = dir.path().join(format!("tiny-{}.gguf", arch.name()));
    let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if !path.exists() {
        let options = SynthOptions {
            arch,
            preset: Preset::Tiny,
            recipe: Recipe::Q8_0,
            seed: 5,
        };
        // qwen35moe files carry an MTP block, as converted checkpoints do.
        match arch {
            Arch::Qwen35Moe => synth::plan_mtp(options),
            Arch::CloverMoe => synth::plan(options),
        }
        .unwrap()
        .write(&path, Some(1))
        .unwrap();
    }
    path
}

/// `clover chat ARGS` with `input` piped in (line mode: stdout is a pipe too).
fn chat(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_clover"))
        .arg("chat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    // Written from a thread: a long input must not block on a full pipe.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn model_args(path: &Path) -> Vec<&str> {
    vec!["-m", path.to_str().unwrap(), "-t", "1", "--temp", "0"]
}

/// The reply paragraphs of line mode (each ends with a blank line).
fn paragraphs(stdout: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stdout)
        .split("\n\n")
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn chat_line_mode_survives_a_full_context_and_answers_every_line() {
    let path = tiny(Arch::CloverMoe);
    let mut args = model_args(&path);
    args.extend(["-c", "256", "-n", "48"]);
    let lines = 40;
    let input: String = (0..lines)
        .map(|i| format!("line {i}: tell me something about the number {i}\n"))
        .collect();
    let out = chat(&args, input.as_bytes());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("error"), "{err}");
    // Every line has its reply; the context was shifted along the way.
    assert_eq!(paragraphs(&out.stdout).len(), lines, "{err}");
    let shifts = err.matches("the context is full").count();
    assert!(shifts >= 2, "{shifts} shifts: {err}");
}

#[test]
fn chat_line_mode_marks_a_reply_cut_by_the_end_of_the_context() {
    let path = tiny(Arch::CloverMoe);
    let mut args = model_args(&path);
    // Replies without a token limit run to the end of the context (the random model
    // rarely ends a reply), then the next turn shifts.
    args.extend(["-c", "128", "-n", "-1"]);
    let out = chat(&args, b"first\nsecond\nthird\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let p = paragraphs(&out.stdout);
    assert_eq!(p.len(), 3, "{p:?}");
    assert!(
        p.iter().any(|p| p.ends_with("[context full]")),
        "no marker: {p:?}"
    );
}

#[test]
fn chat_line_mode_survives_invalid_utf8() {
    let path = tiny(Arch::CloverMoe);
    let mut args = model_args(&path);
    args.extend(["-n", "4"]);
    let out = chat(&args, b"caf\xff\xfe au lait\nsecond line\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(paragraphs(&out.stdout).len(), 2, "{err}");
    assert_eq!(err.matches("not valid UTF-8").count(), 1, "{err}");
}

#[test]
fn chat_line_mode_answers_the_lines_after_one_too_long_for_the_context() {
    let path = tiny(Arch::CloverMoe);
    let mut args = model_args(&path);
    args.extend(["-c", "128", "-n", "8"]);
    let long = "word ".repeat(400);
    let input = format!("short one\n{long}\nshort two\n");
    let out = chat(&args, input.as_bytes());
    let err = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The session goes on to the end, and says at the end that a turn failed.
    assert!(!out.status.success(), "{stdout}");
    assert_ne!(out.status.code(), Some(101), "panicked: {err}");
    assert!(err.contains("1 of 3 turns failed"), "{err}");
    assert_eq!(
        stdout.matches("error: this turn needs").count(),
        1,
        "{stdout}"
    );
    assert_eq!(paragraphs(&out.stdout).len(), 3, "{stdout}");
}

#[test]
fn chat_line_mode_clear_starts_a_fresh_conversation() {
    let path = tiny(Arch::CloverMoe);
    let mut args = model_args(&path);
    args.extend(["-n", "6"]);
    // Greedy replies to the same single question are the same, whatever came before
    // `/clear`.
    let alone = chat(&args, b"what is this\n");
    let after = chat(&args, b"a different start\n/clear\nwhat is this\n");
    assert!(alone.status.success() && after.status.success());
    assert!(String::from_utf8_lossy(&after.stderr).contains("new conversation"));
    let a = paragraphs(&alone.stdout);
    let b = paragraphs(&after.stdout);
    assert_eq!(b.len(), 2);
    assert_eq!(a[0], b[1]);
}

#[test]
fn chat_rejects_draft_self_on_a_file_without_diffusion() {
    let path = tiny(Arch::Qwen35Moe);
    let mut args = model_args(&path);
    args.extend(["--spec-type", "draft-self"]);
    let out = chat(&args, b"hello\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_ne!(out.status.code(), Some(101), "panicked: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(
            "--spec-type draft-self needs a clover_moe file with the block-diffusion tensors"
        ),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

/// A file without the diffusion path speculates in the chat with n-gram
/// drafts and with its MTP block (alone and chained): the greedy replies
/// are plain decoding's, over two turns (the MTP cache follows the
/// conversation), and the summary of the rounds ends the chat on stderr.
#[test]
fn chat_speculates_with_ngram_and_mtp_drafts_on_a_file_without_diffusion() {
    let path = tiny(Arch::Qwen35Moe);
    let mut args = model_args(&path);
    args.extend(["-n", "24"]);
    let input = b"say it again and again\nagain\n";
    let plain = chat(&args, input);
    assert!(
        plain.status.success(),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    for spec in [
        "ngram",
        "ngram:ngram_size_n=1,n_max=4",
        "mtp",
        "mtp:n_max=2",
        "ngram+mtp",
    ] {
        let mut a = args.clone();
        a.extend(["--spec-type", spec]);
        let out = chat(&a, input);
        assert!(
            out.status.success(),
            "{spec}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(paragraphs(&out.stdout), paragraphs(&plain.stdout), "{spec}");
        assert_eq!(paragraphs(&out.stdout).len(), 2);
        // Line mode ends with the speculation summary on stderr.
        let notes = String::from_utf8_lossy(&out.stderr);
        assert!(notes.contains("spec: rounds drafted"), "{spec}: {notes}");
    }
    assert!(!String::from_utf8_lossy(&plain.stderr).contains("spec:"));
}

#[test]
fn chat_load_continues_a_saved_conversation_and_rejects_a_bad_file() {
    let path = tiny(Arch::CloverMoe);
    let dir = tempfile::tempdir().unwrap();
    let saved = dir.path().join("saved.json");
    std::fs::write(
        &saved,
        r#"{"format": "clover-chat", "version": 1, "system": "be brief",
            "messages": [{"role": "user", "content": "earlier question"},
                         {"role": "assistant", "content": "earlier answer"}]}"#,
    )
    .unwrap();
    let mut args = model_args(&path);
    args.extend(["-n", "6", "--load", saved.to_str().unwrap()]);
    let loaded = chat(&args, b"and now\n");
    assert!(
        loaded.status.success(),
        "{}",
        String::from_utf8_lossy(&loaded.stderr)
    );
    assert_eq!(paragraphs(&loaded.stdout).len(), 1);
    // The saved turns are part of the conversation: the same question alone, with
    // the same system prompt, is answered from a different context.
    let mut plain = model_args(&path);
    plain.extend(["-n", "6", "--system", "be brief"]);
    let alone = chat(&plain, b"and now\n");
    assert_ne!(loaded.stdout, alone.stdout);
    // A file that is not a saved chat: one line, non-zero exit.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, b"{\"hello\": 1}").unwrap();
    let mut args = model_args(&path);
    args.extend(["--load", bad.to_str().unwrap()]);
    let out = chat(&args, b"x\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_ne!(out.status.code(), Some(101), "panicked: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("bad.json"), "{err}");
}
