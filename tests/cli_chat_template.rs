//! A model file whose chat template is hostile (endless work, memory doubling, endless
//! recursion, a namespace holding itself) makes `clover run --chat` fail fast with one error
//! line, never hang, panic or overflow the stack.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clover::gguf::Value;
use clover::synth::{self, Arch, Preset, Recipe, SynthOptions};

/// Writes a `tiny` synthetic model carrying `template` as its chat template.
fn model_with_template(path: &Path, template: &str) {
    let mut plan = synth::plan(SynthOptions {
        arch: Arch::CloverMoe,
        preset: Preset::Tiny,
        recipe: Recipe::F32,
        seed: 5,
    })
    .unwrap();
    plan.writer
        .set("tokenizer.chat_template", Value::str(template));
    plan.write(path, Some(1)).unwrap();
}

/// Runs `clover run --chat` on a file with `template`; checks for one error line naming the
/// exceeded limit, a non-zero exit other than a panic's, and a quick failure.
fn chat_fails_fast(template: &str, limit: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hostile.gguf");
    model_with_template(&path, template);
    let t0 = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_clover"))
        .args(["run", "-m", path.to_str().unwrap(), "-t", "1"])
        .args(["--chat", "-p", "hello", "-n", "2", "--temp", "0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = t0.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "succeeded: {err}");
    assert_ne!(out.status.code(), Some(101), "panicked: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(
        err.contains("the model's chat template exceeded") && err.contains(limit),
        "{err:?}"
    );
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

#[test]
fn a_chat_template_that_loops_without_end_is_one_error_line_and_a_quick_non_zero_exit() {
    chat_fails_fast(
        "{% for i in range(100000) %}{% for j in range(100000) %}{% set x = j %}{% endfor %}{% endfor %}",
        "work limit",
    );
}

#[test]
fn a_chat_template_that_doubles_a_string_thirty_times_is_one_error_line_and_a_quick_exit() {
    chat_fails_fast(
        &format!(
            "{{% set s = 'ab' %}}{}{{{{ s }}}}",
            "{% set s = s ~ s %}".repeat(30)
        ),
        "work limit",
    );
}

#[test]
fn a_chat_template_that_recurses_without_end_is_one_error_line_and_a_quick_exit() {
    chat_fails_fast(
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        "nesting limit",
    );
}

#[test]
fn a_chat_template_whose_namespace_holds_itself_is_one_error_line_not_a_stack_overflow() {
    chat_fails_fast(
        "{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}",
        "nesting limit",
    );
}

/// A template that does not compile blocks only what renders it: a raw
/// `run` and `perplexity` work, `run --chat` is one line naming it.
#[test]
fn a_template_with_a_syntax_error_refuses_chat_but_not_raw_prompts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.gguf");
    model_with_template(&path, "{% for m in messages %}{{ m.content }");
    let run = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_clover"))
            .args(["run", "-m", path.to_str().unwrap(), "-t", "1"])
            .args(["-p", "hello", "-n", "2", "--temp", "0"])
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let raw = run(&[]);
    assert!(
        raw.status.success(),
        "{}",
        String::from_utf8_lossy(&raw.stderr)
    );
    let text = dir.path().join("t.txt");
    std::fs::write(&text, "hello world, this is a text. ".repeat(20)).unwrap();
    let ppl = Command::new(env!("CARGO_BIN_EXE_clover"))
        .args(["perplexity", "-m", path.to_str().unwrap(), "-f"])
        .arg(&text)
        .args(["-c", "16", "-t", "1"])
        .output()
        .unwrap();
    assert!(
        ppl.status.success(),
        "{}",
        String::from_utf8_lossy(&ppl.stderr)
    );
    let chat = run(&["--chat"]);
    let err = String::from_utf8_lossy(&chat.stderr);
    assert!(!chat.status.success(), "{err}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.contains("chat template does not compile"), "{err:?}");
}

/// The marks around message text must not change what a template renders:
/// one that tests a message's text (`startswith`) and so renders otherwise
/// with them gets the unmarked rendering, tokenized as llama-server does.
#[test]
fn a_template_that_looks_at_the_text_renders_as_without_marks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("looks.gguf");
    model_with_template(
        &path,
        "{% for m in messages %}{% if m.content.startswith('x') %}X{% endif %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}",
    );
    let m = clover::engine::LoadedModel::open(&path).unwrap();
    let msgs = [clover::chat::ChatMessage::user("x marks <|im_start|>")];
    let (text, ids) = m.chat_prompt(&msgs, false).unwrap();
    assert_eq!(text, m.render_chat(&msgs, false).unwrap());
    assert!(text.starts_with('X'), "{text:?}");
    assert_eq!(ids, m.tokenize(&text).unwrap());
    // Text the template does not look at is marked as usual.
    let msgs = [clover::chat::ChatMessage::user("marks <|im_start|>")];
    let (text, ids) = m.chat_prompt(&msgs, false).unwrap();
    assert_eq!(text, m.render_chat(&msgs, false).unwrap());
    assert_ne!(ids, m.tokenize(&text).unwrap());
}
