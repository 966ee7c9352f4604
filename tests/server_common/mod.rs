//! `clover serve` under a real socket, for the tests: a tiny synthetic
//! model, a server started on an ephemeral port (killed on drop), and `curl`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn clover() -> Command {
    Command::new(env!("CARGO_BIN_EXE_clover"))
}

pub fn tiny_model(dir: &Path) -> PathBuf {
    let p = dir.join("tiny.gguf");
    let out = clover()
        .args([
            "synth",
            "--arch",
            "qwen35moe",
            "--preset",
            "tiny",
            "--recipe",
            "q8_0",
        ])
        .args(["--seed", "101", "-o", p.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    p
}

/// A running server; killed on drop.
pub struct Server {
    pub child: Child,
    pub base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start(model: &Path, extra: &[&str]) -> Server {
    let mut child = clover()
        .args([
            "serve",
            "-m",
            model.to_str().unwrap(),
            "--port",
            "0",
            "-t",
            "2",
        ])
        .args(extra)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let mut base = None;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.split("listening on ").nth(1) {
            base = Some(rest.split_whitespace().next().unwrap().to_string());
            break;
        }
    }
    // Keep draining stderr so the server never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    let base = base.expect("the server printed its address");
    let s = Server { child, base };
    let t0 = Instant::now();
    while curl(&s, &["/health"]).0 != 200 {
        assert!(t0.elapsed() < Duration::from_secs(30), "not ready in 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    s
}

/// `curl` on `path` (first argument) with more arguments: (status, body).
pub fn curl(s: &Server, args: &[&str]) -> (u16, String) {
    let url = format!("{}{}", s.base, args[0]);
    let out = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", &url])
        .args(&args[1..])
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

pub fn post(s: &Server, path: &str, body: &str, more: &[&str]) -> (u16, String) {
    let mut args = vec![path, "-H", "Content-Type: application/json", "-d", body];
    args.extend(more);
    curl(s, &args)
}

/// `post` that must answer 200: its JSON.
pub fn post_ok(s: &Server, path: &str, body: &str) -> serde_json::Value {
    let (code, resp) = post(s, path, body, &[]);
    assert_eq!(code, 200, "{path} {body}: {resp}");
    json(&resp)
}

pub fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

pub fn metric(s: &Server, name: &str) -> f64 {
    let (_, text) = curl(s, &["/metrics"]);
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// Sends SIGTERM to the server and waits for it to exit (at most `limit`):
/// its exit status and how long it took.
pub fn sigterm_and_wait(s: &mut Server, limit: Duration) -> (std::process::ExitStatus, Duration) {
    // SAFETY: a signal to our own child process.
    unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
    let t0 = Instant::now();
    loop {
        if let Some(st) = s.child.try_wait().unwrap() {
            return (st, t0.elapsed());
        }
        assert!(
            t0.elapsed() < limit,
            "still running {limit:?} after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
