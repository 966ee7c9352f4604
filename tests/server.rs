//! `clover serve` over real HTTP: started on an ephemeral port with a tiny
//! synthetic model, driven with plain `curl` (errors, limits, keys, a client
//! that leaves mid-stream, SIGTERM) and with the official `openai` Python
//! client (tests/server_openai.py: chat and completions, streamed and not,
//! stop strings, the tools round trip, eight concurrent streams whose greedy
//! text equals the text made alone).

mod skip;

mod server_common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use server_common::{
    curl, json, metric, post, post_ok, sigterm_and_wait, start, tiny_model, Server,
};

#[test]
fn curl_sees_the_api_its_errors_and_its_limits() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(&tiny_model(dir.path()), &["-np", "2", "--max-body", "4096"]);
    let (code, body) = curl(&s, &["/v1/models"]);
    assert_eq!(code, 200);
    assert_eq!(json(&body)["data"][0]["id"], "tiny");

    let chat = r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"temperature":0}"#;
    let (code, body) = post(&s, "/v1/chat/completions", chat, &[]);
    assert_eq!(code, 200, "{body}");
    let v = json(&body);
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["usage"]["completion_tokens"], v["timings"]["predicted_n"]);
    let text = v["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();

    // Streamed: data lines, the same text, [DONE] last.
    let stream = r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"temperature":0,"stream":true}"#;
    let (code, body) = post(&s, "/v1/chat/completions", stream, &["-N"]);
    assert_eq!(code, 200);
    let events: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(events.last(), Some(&"[DONE]"), "{body}");
    let streamed: String = events[..events.len() - 1]
        .iter()
        .filter_map(|e| {
            json(e)["choices"][0]["delta"]["content"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert_eq!(streamed, text);

    // The same prompt again restarts at the checkpoint taken before its last
    // token: one token evaluated, the rest reused, the same greedy text.
    let (code, body) = post(&s, "/v1/chat/completions", chat, &[]);
    assert_eq!(code, 200, "{body}");
    let again = json(&body);
    assert_eq!(
        again["choices"][0]["message"]["content"].as_str(),
        Some(text.as_str())
    );
    let n = again["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(n > 1, "{body}");
    assert_eq!(again["timings"]["cache_n"].as_u64(), Some(n - 1), "{body}");
    assert_eq!(again["timings"]["prompt_n"].as_u64(), Some(1), "{body}");

    // Errors: OpenAI's object, the right status.
    let too_long = format!(
        r#"{{"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "word ".repeat(900)
    );
    for (path, body, want) in [
        ("/v1/chat/completions", "{not json", 400),
        (
            "/v1/chat/completions",
            r#"{"messages":[{"role":"user","content":"hi"}],"n":2}"#,
            400,
        ),
        (
            "/v1/chat/completions",
            r#"{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}"#,
            400,
        ),
        ("/v1/chat/completions", r#"{"messages":"hi"}"#, 400),
        ("/v1/completions", r#"{"prompt":7}"#, 400),
        ("/v1/chat/completions", too_long.as_str(), 413),
        ("/v1/nothing", "{}", 404),
    ] {
        let (code, resp) = post(&s, path, body, &[]);
        assert_eq!(code, want, "{path} {body:.60}: {resp}");
        let e = &json(&resp)["error"];
        assert!(e["message"].is_string() && e["type"].is_string(), "{resp}");
    }
    // A prompt longer than a slot's context.
    drop(s);
    let s = start(&tiny_model(dir.path()), &["-np", "1", "-c", "32"]);
    let long = format!(
        r#"{{"prompt":"{}","max_tokens":1}}"#,
        "and it was so ".repeat(20)
    );
    let (code, resp) = post(&s, "/v1/completions", &long, &[]);
    assert_eq!(code, 400, "{resp}");
    assert!(resp.contains("context"), "{resp}");
}

#[test]
fn an_api_key_is_required_when_set() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(&tiny_model(dir.path()), &["--api-key", "sesame"]);
    let body = r#"{"prompt":"x","max_tokens":1}"#;
    assert_eq!(post(&s, "/v1/completions", body, &[]).0, 401);
    assert_eq!(
        post(
            &s,
            "/v1/completions",
            body,
            &["-H", "Authorization: Bearer wrong"]
        )
        .0,
        401
    );
    assert_eq!(
        post(
            &s,
            "/v1/completions",
            body,
            &["-H", "Authorization: Bearer sesame"]
        )
        .0,
        200
    );
    // As llama-server: the tokenizer and the properties need the key too.
    let tok = r#"{"content":"x"}"#;
    assert_eq!(post(&s, "/tokenize", tok, &[]).0, 401);
    let key = ["-H", "Authorization: Bearer sesame"];
    assert_eq!(post(&s, "/tokenize", tok, &key).0, 200);
    assert_eq!(post(&s, "/detokenize", r#"{"tokens":[1]}"#, &[]).0, 401);
    assert_eq!(curl(&s, &["/props"]).0, 401);
    assert_eq!(curl(&s, &["/slots"]).0, 401);
    // Health and metrics stay open (load balancers probe them).
    assert_eq!(curl(&s, &["/health"]).0, 200);
    assert_eq!(curl(&s, &["/metrics"]).0, 200);
    // The scheme's name is case-insensitive, as HTTP says.
    for scheme in ["bearer", "BEARER", "BeArEr"] {
        let h = format!("Authorization: {scheme} sesame");
        assert_eq!(post(&s, "/v1/completions", body, &["-H", &h]).0, 200);
    }
}

/// The headers of `curl -i` output, lower-cased names: (status, headers).
fn head_of(s: &Server, args: &[&str]) -> (u16, Vec<(String, String)>) {
    let mut all = vec![args[0], "-i"];
    all.extend(&args[1..]);
    let (code, text) = curl(s, &all);
    let headers = text
        .split("\r\n\r\n")
        .next()
        .unwrap_or("")
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (code, headers)
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

#[test]
fn browsers_get_cors_as_llama_server_gives_it_and_the_flag_restricts_origins() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    // What Chromium sends before a cross-origin POST with a JSON body and a
    // key: a preflight without credentials.
    let preflight = [
        "/v1/chat/completions",
        "-X",
        "OPTIONS",
        "-H",
        "Origin: http://localhost:5173",
        "-H",
        "Access-Control-Request-Method: POST",
        "-H",
        "Access-Control-Request-Headers: authorization,content-type",
        "-H",
        "Sec-Fetch-Mode: cors",
    ];
    let chat = r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}"#;
    let s = start(&model, &["--api-key", "k"]);
    let (code, h) = head_of(&s, &preflight);
    assert_eq!(code, 204, "{h:?}");
    assert_eq!(
        header(&h, "access-control-allow-origin"),
        Some("http://localhost:5173")
    );
    let methods = header(&h, "access-control-allow-methods").unwrap();
    assert!(methods.contains("POST") && methods.contains("GET"), "{h:?}");
    let allowed = header(&h, "access-control-allow-headers").unwrap();
    assert!(allowed.contains("authorization") && allowed.contains("content-type"));
    // The request itself carries the origin back.
    let (code, h) = head_of(
        &s,
        &[
            "/v1/chat/completions",
            "-H",
            "Origin: http://localhost:5173",
            "-H",
            "Authorization: Bearer k",
            "-H",
            "Content-Type: application/json",
            "-d",
            chat,
        ],
    );
    assert_eq!(code, 200);
    assert_eq!(
        header(&h, "access-control-allow-origin"),
        Some("http://localhost:5173")
    );
    drop(s);
    // Restricted: the listed origin is allowed, another gets no CORS headers
    // (the browser then refuses the page the answer).
    let s = start(&model, &["--cors-origins", "https://chat.example.com"]);
    let (code, h) = head_of(&s, &preflight);
    assert_eq!(code, 204);
    assert_eq!(header(&h, "access-control-allow-origin"), None, "{h:?}");
    let mut ok = preflight;
    ok[4] = "Origin: https://chat.example.com";
    let (_, h) = head_of(&s, &ok);
    assert_eq!(
        header(&h, "access-control-allow-origin"),
        Some("https://chat.example.com")
    );
}

#[test]
fn a_client_that_leaves_mid_stream_frees_its_slot_and_sigterm_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = start(
        &tiny_model(dir.path()),
        &["-np", "1", "-c", "8192", "--shutdown-timeout", "0"],
    );
    // A generation that runs to its limit (ignore_eos), timed whole first.
    let whole =
        r#"{"prompt":"In the beginning","max_tokens":3000,"temperature":0,"ignore_eos":true}"#;
    let t0 = Instant::now();
    let (code, resp) = post(&s, "/v1/completions", whole, &[]);
    let full = t0.elapsed();
    assert_eq!(code, 200, "{resp}");
    assert_eq!(json(&resp)["usage"]["completion_tokens"], 3000);
    // The same, streamed and abandoned after a tenth of its time.
    let body = whole.replace(
        r#""ignore_eos":true}"#,
        r#""ignore_eos":true,"stream":true}"#,
    );
    let before = metric(&s, "clover_tokens_predicted_total");
    let leave = format!("{:.3}", (full.as_secs_f64() / 10.0).max(0.05));
    let t0 = Instant::now();
    let _ = post(&s, "/v1/completions", &body, &["-N", "--max-time", &leave]);
    let left = t0.elapsed();
    let mut freed = None;
    while t0.elapsed() < full * 2 {
        if metric(&s, "clover_slots_busy") == 0.0 {
            freed = Some(t0.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let freed = freed.expect("the slot stayed busy after the client left");
    let made = metric(&s, "clover_tokens_predicted_total") - before;
    eprintln!(
        "whole generation {:.2} s; client left at {:.2} s; slot free at {:.2} s after {made} tokens",
        full.as_secs_f64(),
        left.as_secs_f64(),
        freed.as_secs_f64()
    );
    assert!(
        made < 1500.0,
        "{made} of 3000 tokens made for a client that left"
    );
    assert!(
        freed < left + full / 4,
        "the slot was freed {freed:?} after the request"
    );
    // The next request is served at once.
    let (code, _) = post(
        &s,
        "/v1/completions",
        r#"{"prompt":"x","max_tokens":2}"#,
        &[],
    );
    assert_eq!(code, 200);

    // SIGTERM with a request in flight: it is cut within the grace period
    // (0 s here) and the server exits 0.
    let base = s.base.clone();
    let h = std::thread::spawn(move || {
        Command::new("curl")
            .args(["-s", "-N", &format!("{base}/v1/completions"), "-d", &body])
            .output()
            .unwrap()
    });
    std::thread::sleep(full / 10);
    let (status, _) = sigterm_and_wait(&mut s, Duration::from_secs(20));
    assert!(status.success(), "exit status {status:?}");
    let _ = h.join();
}

/// Prompts evaluated a batch per step beside decoding slots (`-ub 12`: a
/// prompt of dozens of tokens takes many steps) give each request the greedy
/// text it gets alone, and the server says it mixed them.
#[test]
fn prompts_evaluated_beside_decoding_slots_keep_their_greedy_text() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(dir.path());
    let body = |prompt: &str, n: usize, stream: bool| {
        format!(
            r#"{{"prompt":"{prompt}","max_tokens":{n},"temperature":0,"ignore_eos":true,"stream":{stream}}}"#
        )
    };
    let text = |resp: &str| {
        json(resp)["choices"][0]["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let prompts = [
        "Once upon a time there was a small house by the river and a garden full of beans",
        "The committee met on a Tuesday to discuss the budget, the roads, the school and the old mill",
        "Numbers: one two three four five six seven eight nine ten eleven twelve thirteen",
    ];
    // Alone, each on a fresh server (no prefix to reuse).
    let mut alone = Vec::new();
    for p in prompts {
        let s = start(&model, &["-np", "3", "-ub", "12"]);
        let (code, resp) = post(&s, "/v1/completions", &body(p, 24, false), &[]);
        assert_eq!(code, 200, "{resp}");
        alone.push(text(&resp));
    }
    // Together: a long generation decodes while the prompts arrive.
    let s = start(&model, &["-np", "3", "-ub", "12"]);
    let long = body("In the beginning", 400, true);
    let mut first = Command::new("curl")
        .args([
            "-s",
            "-N",
            &format!("{}/v1/completions", s.base),
            "-d",
            &long,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(first.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with("data: "), "{line}");
    let handles: Vec<_> = prompts
        .iter()
        .map(|p| {
            let (base, b) = (s.base.clone(), body(p, 24, false));
            std::thread::spawn(move || {
                let out = Command::new("curl")
                    .args(["-s", &format!("{base}/v1/completions"), "-d", &b])
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&out.stdout).to_string()
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let resp = h.join().unwrap();
        assert_eq!(text(&resp), alone[i], "prompt {i} beside the others");
    }
    let _ = first.kill();
    let _ = first.wait();
    let mixed = metric(&s, "clover_batch_mixed_steps_total");
    let prompt_tokens = metric(&s, "clover_batch_prompt_tokens_total");
    eprintln!("{mixed} mixed steps, {prompt_tokens} prompt tokens in batched steps");
    assert!(
        mixed > 0.0,
        "no step decoded and evaluated a prompt together"
    );
}

/// Whether python3 can import `module`; a test without it is skipped,
/// unless CLOVER_REQUIRE_ORACLES is set (as in CI).
fn python_has(module: &str) -> bool {
    let have = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        assert!(
            std::env::var_os("CLOVER_REQUIRE_ORACLES").is_none(),
            "CLOVER_REQUIRE_ORACLES is set but python3 cannot import {module}"
        );
        skip::skipped(
            "a Python client test",
            &format!("python3 cannot import {module}"),
            &format!("pip install {module}"),
        );
    }
    have
}

/// Runs the client script `tests/NAME` against `url`; fails with its output.
fn run_client(name: &str, url: &str) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(name);
    let out = Command::new("python3")
        .arg(script)
        .arg(url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_openai_python_client_works_against_it() {
    if !python_has("openai") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let s = start(&tiny_model(dir.path()), &["-np", "4"]);
    run_client("server_openai.py", &format!("{}/v1", s.base));
}

#[test]
fn forced_tool_calls_parse_in_every_client_and_follow_the_schema() {
    let template =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/templates/tool_calls.jinja");
    let dir = tempfile::tempdir().unwrap();
    let s = start(
        &tiny_model(dir.path()),
        &["--chat-template-file", template.to_str().unwrap()],
    );
    // The template offers the tools: they are in the prompt.
    let plain = r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}"#;
    let with = plain.replace(
        r#""max_tokens":1"#,
        r#""max_tokens":1,"tools":[{"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{}}}}]"#,
    );
    let tokens = |body: &str| {
        post_ok(&s, "/v1/chat/completions", body)["usage"]["prompt_tokens"]
            .as_u64()
            .unwrap()
    };
    assert!(tokens(&with) > tokens(plain) + 10);
    for module in ["openai", "anthropic", "litellm", "langchain_openai"] {
        if !python_has(module) {
            return;
        }
    }
    run_client("server_tools.py", &s.base);
}

/// `ln softmax(row)` in f64, and the `n` largest entries (ties to the lower
/// id): the test's own arithmetic, not the server's.
fn log_softmax_top(row: &[f32], n: usize) -> (Vec<f64>, Vec<usize>) {
    let max = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
    let lse = max
        + row
            .iter()
            .map(|&x| (x as f64 - max).exp())
            .sum::<f64>()
            .ln();
    let lp: Vec<f64> = row.iter().map(|&x| x as f64 - lse).collect();
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    order.truncate(n);
    (lp, order)
}

#[test]
fn logprobs_are_the_models_own_under_batching_and_speculation() {
    use clover::engine::{LoadedModel, Session, SessionOptions};

    // The shipped trained model: its drafts are accepted, so the
    // speculating server reports tokens from verify rows too.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/clover-tiny-kjv.gguf");
    let prompt = "In the beginning God created the heaven and the earth. And the earth was";
    let (n, top) = (32, 3);

    // The reference: the engine's logits on a slot's path (the prompt with
    // its checkpoint, then plain decoding token by token), greedy, with the
    // test's own log-softmax.
    let m = std::sync::Arc::new(LoadedModel::open(&path).unwrap());
    let mut session = Session::new(std::sync::Arc::clone(&m), SessionOptions::new(256)).unwrap();
    let ids = m.tokenize(prompt).unwrap();
    let mut row = session.prefill_checkpointed(&ids).unwrap().1.to_vec();
    let mut want = Vec::new();
    for _ in 0..n {
        let (lp, best) = log_softmax_top(&row, top);
        let tok = best[0];
        want.push((
            tok,
            lp[tok],
            best.iter().map(|&b| (b, lp[b])).collect::<Vec<_>>(),
        ));
        row = session.decode(tok as u32).unwrap().to_vec();
    }
    let text =
        |id: usize| String::from_utf8_lossy(m.tokenizer.piece(id as u32).unwrap()).to_string();

    // The trunk of the default model's qwen35moe sibling is the default
    // model's, bit for bit: the same reference holds with its MTP block.
    let sibling = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/clover-tiny-kjv-mtp.gguf");
    for (file, extra, spec) in [
        (&path, &["-np", "2"][..], false),
        (&path, &["-np", "2", "--spec-type", "draft-self"][..], true),
        (
            &path,
            &["-np", "2", "--spec-type", "ngram:ngram_size_n=2"][..],
            true,
        ),
        (&sibling, &["-np", "2", "--spec-type", "mtp"][..], true),
    ] {
        let s = start(file, extra);
        let body = format!(
            r#"{{"prompt":"{prompt}","max_tokens":{n},"temperature":0,"ignore_eos":true,"logprobs":{top}}}"#
        );
        let (code, resp) = post(&s, "/v1/completions", &body, &[]);
        assert_eq!(code, 200, "{resp}");
        let v = json(&resp);
        let lp = &v["choices"][0]["logprobs"];
        let tokens = lp["tokens"].as_array().unwrap();
        assert_eq!(tokens.len(), n, "{resp}");
        let mut offset = 0;
        for (i, (tok, want_lp, want_top)) in want.iter().enumerate() {
            assert_eq!(
                tokens[i].as_str().unwrap(),
                text(*tok),
                "token {i} (spec {spec})"
            );
            let got = lp["token_logprobs"][i].as_f64().unwrap();
            assert!(
                (got - want_lp).abs() < 1e-4,
                "token {i}: {got} against {want_lp} (spec {spec})"
            );
            let alts = lp["top_logprobs"][i].as_object().unwrap();
            for &(b, l) in want_top {
                let g = alts[&text(b)].as_f64().unwrap();
                assert!(
                    (g - l).abs() < 1e-4,
                    "token {i} alternative {b}: {g} against {l}"
                );
            }
            assert_eq!(lp["text_offset"][i].as_u64().unwrap() as usize, offset);
            offset += text(*tok).chars().count();
        }
        let t = &v["timings"];
        if spec {
            assert!(
                t["draft_n_accepted"].as_u64().unwrap() > 0,
                "no draft accepted, so no verify row was reported: {t}"
            );
        }
        // Chat: every content token with its alternatives, most likely
        // first, the chosen one on top at temperature 0.
        let (code, resp) = post(
            &s,
            "/v1/chat/completions",
            r#"{"messages":[{"role":"user","content":"Who made the earth?"}],"max_tokens":16,"temperature":0,"logprobs":true,"top_logprobs":2}"#,
            &[],
        );
        assert_eq!(code, 200, "{resp}");
        let v = json(&resp);
        let content = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
        let mut bytes = Vec::new();
        for c in content {
            let alts = c["top_logprobs"].as_array().unwrap();
            assert_eq!(alts.len(), 2, "{c}");
            assert_eq!(alts[0]["token"], c["token"], "{c}");
            assert!(
                alts[0]["logprob"].as_f64() >= alts[1]["logprob"].as_f64(),
                "{c}"
            );
            bytes.extend(
                c["bytes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b.as_u64().unwrap() as u8),
            );
        }
        let said = v["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(
            !said.is_empty() && String::from_utf8_lossy(&bytes) == said,
            "{resp}"
        );
    }
}

#[test]
fn logprob_fields_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(&tiny_model(dir.path()), &["-np", "1"]);
    let chat = |extra: &str| {
        post(
            &s,
            "/v1/chat/completions",
            &format!(r#"{{"messages":[{{"role":"user","content":"hi"}}],"max_tokens":2{extra}}}"#),
            &[],
        )
    };
    for bad in [
        r#","top_logprobs":2"#,
        r#","logprobs":true,"top_logprobs":21"#,
        r#","logprobs":"yes""#,
    ] {
        let (code, resp) = chat(bad);
        assert_eq!(code, 400, "{bad}: {resp}");
        assert!(json(&resp)["error"]["param"].is_string(), "{resp}");
    }
    let (code, resp) = chat("");
    assert_eq!(code, 200, "{resp}");
    assert!(json(&resp)["choices"][0]["logprobs"].is_null(), "{resp}");
    let (code, resp) = post(
        &s,
        "/v1/completions",
        r#"{"prompt":"a","max_tokens":2,"logprobs":-1}"#,
        &[],
    );
    assert_eq!(code, 400, "{resp}");
}

#[test]
fn tokenize_detokenize_and_props_answer_as_llama_server_does() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/clover-tiny-kjv.gguf");
    let m = clover::engine::LoadedModel::open(&path).unwrap();
    let s = start(&path, &["-np", "3", "-c", "512"]);
    let text = "And God said, Let there be light: and there was light.";

    // The tokenizer's ids, without the BOS unless asked for.
    let mut want = m.tokenizer.encode(text, true).unwrap();
    let bos = m.tokenizer.add_bos().then(|| want.remove(0));
    let ids = |body: &str| -> Vec<u32> {
        let (code, resp) = post(&s, "/tokenize", body, &[]);
        assert_eq!(code, 200, "{resp}");
        json(&resp)["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect()
    };
    assert_eq!(ids(&format!(r#"{{"content":"{text}"}}"#)), want);
    let with_bos = ids(&format!(r#"{{"content":"{text}","add_special":true}}"#));
    assert_eq!(with_bos.len(), want.len() + bos.is_some() as usize);
    let (code, resp) = post(
        &s,
        "/tokenize",
        &format!(r#"{{"content":"{text}","with_pieces":true}}"#),
        &[],
    );
    assert_eq!(code, 200, "{resp}");
    let pieces = json(&resp)["tokens"].as_array().unwrap().clone();
    let joined: String = pieces
        .iter()
        .map(|p| p["piece"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(joined, text);
    assert_eq!(pieces[0]["id"].as_u64().unwrap() as u32, want[0]);

    // And back.
    let list = want
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let (code, resp) = post(&s, "/detokenize", &format!(r#"{{"tokens":[{list}]}}"#), &[]);
    assert_eq!(code, 200, "{resp}");
    assert_eq!(json(&resp)["content"], text);
    for bad in [r#"{"tokens":[99999999]}"#, r#"{"tokens":"1 2"}"#] {
        let (code, resp) = post(&s, "/detokenize", bad, &[]);
        assert_eq!(code, 400, "{bad}: {resp}");
    }
    let (code, resp) = post(&s, "/tokenize", r#"{"content":7}"#, &[]);
    assert_eq!(code, 400, "{resp}");

    let (code, resp) = curl(&s, &["/props"]);
    assert_eq!(code, 200, "{resp}");
    let v = json(&resp);
    assert_eq!(v["total_slots"], 3, "{resp}");
    // A slot's share of -c, as llama-server divides it.
    assert_eq!(v["default_generation_settings"]["n_ctx"], 512 / 3, "{resp}");
    assert_eq!(
        v["default_generation_settings"]["params"]["temperature"], 0.8,
        "{resp}"
    );

    // The slots, before and after a request: one keeps its sequence.
    let slots = || {
        let (code, resp) = curl(&s, &["/slots"]);
        assert_eq!(code, 200, "{resp}");
        json(&resp).as_array().unwrap().clone()
    };
    let before = slots();
    assert_eq!(before.len(), 3);
    assert!(before
        .iter()
        .all(|x| x["n_ctx"] == 512 / 3 && x["is_processing"] == false));
    let (code, resp) = post(
        &s,
        "/v1/completions",
        r#"{"prompt":"And God saw","max_tokens":3}"#,
        &[],
    );
    assert_eq!(code, 200, "{resp}");
    let kept: Vec<u64> = slots()
        .iter()
        .map(|x| x["n_tokens_cached"].as_u64().unwrap())
        .collect();
    assert_eq!(kept.iter().filter(|&&n| n > 0).count(), 1, "{kept:?}");
    // llama-server's aliases.
    let id = |path: &str| json(&curl(&s, &[path]).1)["data"][0]["id"].clone();
    assert_eq!(id("/models"), id("/v1/models"));
    assert_eq!(curl(&s, &["/v1/health"]).0, 200);
}

#[test]
fn json_mode_replies_with_one_json_object() {
    // The shipped model, speculating: its slots decode JSON-mode replies
    // token by token.
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/clover-tiny-kjv.gguf");
    let s = start(&model, &["-np", "2", "--spec-type", "draft-self"]);
    let id_of = |text: &str| -> u64 {
        let (code, resp) = post(&s, "/tokenize", &format!(r#"{{"content":"{text}"}}"#), &[]);
        assert_eq!(code, 200, "{resp}");
        let v = json(&resp);
        let ids = v["tokens"].as_array().unwrap();
        assert_eq!(ids.len(), 1, "{text}: {resp}");
        ids[0].as_u64().unwrap()
    };
    let close = id_of("}");
    let chat = |extra: &str| {
        post(
            &s,
            "/v1/chat/completions",
            &format!(
                r#"{{"messages":[{{"role":"user","content":"Reply in JSON."}}],"response_format":{{"type":"json_object"}}{extra}}}"#
            ),
            &[],
        )
    };
    // `}` pushed far above everything: refused until an object is open,
    // then it closes it, and then only the end may follow.
    for temp in ["0", "1"] {
        let (code, resp) = chat(&format!(
            r#","max_tokens":40,"temperature":{temp},"seed":3,"logit_bias":{{"{close}":100}}"#
        ));
        assert_eq!(code, 200, "{resp}");
        let v = json(&resp);
        let text = v["choices"][0]["message"]["content"].as_str().unwrap();
        let parsed: serde_json::Value =
            serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
        assert!(parsed.is_object(), "{text:?}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop", "{resp}");
    }
    // Left to this model, which knows no JSON, the reply is still an object's
    // beginning:
    // whitespace (bounded), then `{`.
    let (code, resp) = chat(r#","max_tokens":40,"temperature":0"#);
    assert_eq!(code, 200, "{resp}");
    let text = json(&resp)["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let lead = text.len() - text.trim_start().len();
    assert!(text.trim_start().starts_with('{') && lead <= 21, "{text:?}");
    // Without JSON mode the same bias gives `}` at once.
    let (code, resp) = post(
        &s,
        "/v1/completions",
        &format!(
            r#"{{"prompt":"a","max_tokens":3,"temperature":0,"logit_bias":{{"{close}":100}}}}"#
        ),
        &[],
    );
    assert_eq!(code, 200, "{resp}");
    assert_eq!(json(&resp)["choices"][0]["text"], "}}}", "{resp}");

    for bad in [
        r#","response_format":{"type":"json_schema","json_schema":{}}"#,
        r#","grammar":"root ::= \"x\"""#,
        r#","logit_bias":{"999999999":1}"#,
        r#","logit_bias":{"5":101}"#,
        r#","logit_bias":[[5]]"#,
    ] {
        let (code, resp) = post(
            &s,
            "/v1/chat/completions",
            &format!(r#"{{"messages":[{{"role":"user","content":"x"}}]{bad}}}"#),
            &[],
        );
        assert_eq!(code, 400, "{bad}: {resp}");
    }
    let (code, resp) = post(
        &s,
        "/v1/chat/completions",
        r#"{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"yaml"}}"#,
        &[],
    );
    assert_eq!(code, 400, "{resp}");
}

#[test]
fn echo_scores_the_prompt_and_several_prompts_get_a_choice_each() {
    use clover::engine::LoadedModel;
    use clover::model::{LogitsFor, StateOptions};

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/clover-tiny-kjv.gguf");
    let m = LoadedModel::open(&path).unwrap();
    let s = start(&path, &["-np", "2"]);
    let prompt = "And God called the light Day, and the darkness he called Night.";
    let ids = m.tokenize(prompt).unwrap();
    let text = |id: u32| String::from_utf8_lossy(m.tokenizer.piece(id).unwrap()).to_string();

    // The reference: every position's logits in one forward pass, and the
    // test's own log-softmax.
    let mut st = m.model.new_state(StateOptions::new(256)).unwrap();
    let v = m.model.n_vocab();
    let rows = m
        .model
        .forward(&mut st, &ids, 0, LogitsFor::All)
        .unwrap()
        .to_vec();

    // lm-eval's loglikelihood request: echo, one token, logprobs 1.
    let (code, resp) = post(
        &s,
        "/v1/completions",
        &format!(
            r#"{{"prompt":"{prompt}","max_tokens":1,"temperature":0,"logprobs":1,"echo":true}}"#
        ),
        &[],
    );
    assert_eq!(code, 200, "{resp}");
    let r = json(&resp);
    let c = &r["choices"][0];
    let lp = &c["logprobs"];
    let tokens = lp["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), ids.len() + 1, "{resp}");
    assert!(c["text"].as_str().unwrap().starts_with(prompt), "{resp}");
    assert!(lp["token_logprobs"][0].is_null() && lp["top_logprobs"][0].is_null());
    let mut offset = 0;
    for (i, &id) in ids.iter().enumerate() {
        assert_eq!(tokens[i].as_str().unwrap(), text(id), "token {i}");
        assert_eq!(
            lp["text_offset"][i].as_u64().unwrap() as usize,
            offset,
            "token {i}"
        );
        offset += text(id).chars().count();
        if i == 0 {
            continue;
        }
        let (want, best) = log_softmax_top(&rows[(i - 1) * v..i * v], 1);
        let got = lp["token_logprobs"][i].as_f64().unwrap();
        assert!(
            (got - want[id as usize]).abs() < 1e-3,
            "token {i}: {got} against {}",
            want[id as usize]
        );
        let top = lp["top_logprobs"][i].as_object().unwrap();
        assert!(
            top.contains_key(&text(best[0] as u32)),
            "token {i}: {top:?}"
        );
    }
    // The generated token is the greedy one after the prompt.
    let (_, best) = log_softmax_top(&rows[(ids.len() - 1) * v..], 1);
    assert_eq!(tokens[ids.len()].as_str().unwrap(), text(best[0] as u32));
    assert_eq!(r["usage"]["completion_tokens"], 1, "{resp}");

    // The same as a stream: the echoed prompt's chunk first, then the token.
    let out = Command::new("curl")
        .args(["-s", "-N", &format!("{}/v1/completions", s.base), "-d"])
        .arg(format!(
            r#"{{"prompt":"{prompt}","max_tokens":1,"temperature":0,"logprobs":1,"echo":true,"stream":true}}"#
        ))
        .output()
        .unwrap();
    let body = String::from_utf8_lossy(&out.stdout).to_string();
    let chunks: Vec<serde_json::Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|l| *l != "[DONE]")
        .map(json)
        .collect();
    let streamed: Vec<serde_json::Value> = chunks
        .iter()
        .filter(|c| !c["choices"][0]["logprobs"].is_null())
        .flat_map(|c| {
            c["choices"][0]["logprobs"]["token_logprobs"]
                .as_array()
                .unwrap()
                .clone()
        })
        .collect();
    assert_eq!(
        &streamed,
        lp["token_logprobs"].as_array().unwrap(),
        "{body}"
    );
    assert_eq!(chunks[0]["choices"][0]["text"], prompt, "{body}");

    // max_tokens 0 with echo: the prompt alone.
    let (code, resp) = post(
        &s,
        "/v1/completions",
        &format!(r#"{{"prompt":"{prompt}","max_tokens":0,"logprobs":0,"echo":true}}"#),
        &[],
    );
    assert_eq!(code, 200, "{resp}");
    let c = &json(&resp)["choices"][0];
    assert_eq!(c["text"], prompt, "{resp}");
    assert_eq!(c["logprobs"]["tokens"].as_array().unwrap().len(), ids.len());

    // Several prompts, text and ids: one choice each, in order, each as
    // greedy as alone.
    let alone = |p: &str| {
        let (code, resp) = post(
            &s,
            "/v1/completions",
            &format!(r#"{{"prompt":{p},"max_tokens":6,"temperature":0}}"#),
            &[],
        );
        assert_eq!(code, 200, "{resp}");
        json(&resp)["choices"][0]["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let id_list = format!("{ids:?}").replace(' ', "");
    let a = alone(&format!(r#""{prompt}""#));
    let b = alone(r#""In the beginning""#);
    assert_eq!(alone(&id_list), a, "ids as the tokenizer gives them");
    let (code, resp) = post(
        &s,
        "/v1/completions",
        &format!(
            r#"{{"prompt":["{prompt}","In the beginning",{id_list}],"max_tokens":6,"temperature":0}}"#
        ),
        &[],
    );
    assert_eq!(code, 200, "{resp}");
    let r = json(&resp);
    let choices = r["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 3, "{resp}");
    for (i, want) in [&a, &b, &a].into_iter().enumerate() {
        assert_eq!(choices[i]["index"], i, "{resp}");
        assert_eq!(choices[i]["text"].as_str().unwrap(), want, "choice {i}");
    }
    assert_eq!(
        r["usage"]["prompt_tokens"].as_u64().unwrap() as usize,
        2 * ids.len() + m.tokenize("In the beginning").unwrap().len()
    );
    for bad in [
        r#"{"prompt":["a","b"],"stream":true}"#,
        r#"{"prompt":[99999999]}"#,
        r#"{"prompt":[]}"#,
    ] {
        let (code, resp) = post(&s, "/v1/completions", bad, &[]);
        assert_eq!(code, 400, "{bad}: {resp}");
    }
}

#[test]
fn llama_servers_own_completion_endpoint_answers_in_its_shape() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/clover-tiny-kjv.gguf");
    let s = start(&path, &["-np", "2"]);
    let prompt = "In the beginning God created";
    let oai = |extra: &str| {
        let body = format!(r#"{{"prompt":"{prompt}","max_tokens":12,"temperature":0{extra}}}"#);
        let v = post_ok(&s, "/v1/completions", &body);
        v["choices"][0]["text"].as_str().unwrap().to_string()
    };
    let native = |extra: &str| {
        let body = format!(r#"{{"prompt":"{prompt}","n_predict":12,"temperature":0{extra}}}"#);
        post_ok(&s, "/completion", &body)
    };
    let want = oai("");
    let r = native(r#","n_probs":2"#);
    assert_eq!(r["content"], want.as_str(), "{r}");
    assert_eq!(
        (r["stop"].as_bool(), r["stop_type"].as_str()),
        (Some(true), Some("limit")),
        "{r}"
    );
    assert_eq!(r["tokens_predicted"], 12, "{r}");
    assert_eq!(r["prompt"], prompt, "{r}");
    assert!(r["timings"]["predicted_n"] == 12, "{r}");
    let probs = r["completion_probabilities"].as_array().unwrap();
    assert!(!probs.is_empty() && probs.len() <= 12, "{r}");
    for p in probs {
        let top = p["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 2, "{p}");
        assert_eq!(top[0]["id"], p["id"], "{p}");
    }

    // A stop word: the text before it, and which word it was.
    let word = &want[want.len() / 2..want.len() / 2 + 3];
    let r = native(&format!(r#","stop":["{word}"]"#));
    assert_eq!(r["stop_type"], "word", "{r}");
    assert_eq!(r["stopping_word"], word, "{r}");
    assert_eq!(
        r["content"],
        oai(&format!(r#","stop":["{word}"]"#)).as_str(),
        "{r}"
    );

    // Streamed: bare objects, pieces then the final result, no [DONE].
    let out = Command::new("curl")
        .args(["-s", "-N", &format!("{}/completion", s.base), "-d"])
        .arg(format!(
            r#"{{"prompt":"{prompt}","n_predict":12,"temperature":0,"stream":true}}"#
        ))
        .output()
        .unwrap();
    let body = String::from_utf8_lossy(&out.stdout).to_string();
    let events: Vec<serde_json::Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(json)
        .collect();
    let (last, pieces) = events.split_last().expect("events");
    assert!(pieces.iter().all(|e| e["stop"] == false), "{body}");
    let text: String = pieces
        .iter()
        .map(|e| e["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, want, "{body}");
    assert_eq!(
        (last["stop"].as_bool(), last["tokens_predicted"].as_u64()),
        (Some(true), Some(12)),
        "{body}"
    );
    let (code, resp) = post(&s, "/completion", r#"{"prompt":"x","n_probs":99}"#, &[]);
    assert_eq!(code, 400, "{resp}");
}

#[test]
fn the_anthropic_python_client_works_against_it() {
    if !python_has("anthropic") {
        return;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/clover-tiny-kjv.gguf");
    let s = start(&path, &["-np", "2", "--api-key", "sesame"]);
    run_client("server_anthropic.py", &s.base);
}
