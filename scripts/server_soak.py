#!/usr/bin/env python3
"""Soak test of `clover serve`: a mixed crowd for a while, then SIGTERM.

The crowd, all at once, for --minutes (default 30):
  normal       chat and completions, streamed and not, short replies
  disconnect   streams that read a few events and hang up
  slowloris    heads dripped a byte a second (cut by --header-timeout)
  idle         connections that never send a byte (cut by --header-timeout)
  slow body    bodies dripped a byte a second (answered 408 by --body-timeout)
  oversized    bodies over --max-body (413) and prompts larger than a slot (400)
Then SIGTERM while requests are in flight and queued.

Prints, and writes as JSON with --out: responses by kind and status, client
errors by kind, latency of the normal requests, RSS at start (after warm-up),
peak and end (before SIGTERM), the time from SIGTERM to exit and the exit
status. Standard library only.

    python3 scripts/server_soak.py --binary target/release/clover --minutes 30
"""

import argparse
import collections
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

lock = threading.Lock()
statuses = collections.Counter()  # (kind, status) -> n
client_errors = collections.Counter()  # (kind, error) -> n
latencies = collections.defaultdict(list)  # kind -> seconds
rss_by_minute = []
# Set at SIGTERM: what clients see from then on is counted apart.
stopping = threading.Event()


def count(kind, status):
    with lock:
        statuses[(kind + (" after SIGTERM" if stopping.is_set() else ""), status)] += 1


def error(kind, e):
    with lock:
        client_errors[(kind + (" after SIGTERM" if stopping.is_set() else ""), type(e).__name__)] += 1
    time.sleep(0.2)


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def start_server(args):
    cmd = [args.binary, "serve", "--port", "0", "--parallel", "4", "-t", str(args.threads)]
    if args.model:
        cmd += ["-m", args.model]
    cmd += ["--shutdown-timeout", str(args.shutdown_timeout)]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    port = None
    for line in p.stderr:
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit("the server did not start")
    lines = []
    threading.Thread(target=lambda: lines.extend(p.stderr), daemon=True).start()
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                break
        except OSError:
            pass
        time.sleep(0.2)
    return p, port, lines


def post(port, path, body, timeout=300):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    return c, c.getresponse()


PROMPTS = ["In the beginning", "And God said", "Read me a psalm.", "Who was Moses?", "hi"]


def normal(port, stop):
    while not stop.is_set():
        kind = random.choice(["chat", "chat-stream", "completion", "completion-stream"])
        stream = kind.endswith("stream")
        n = random.randint(8, 64)
        if kind.startswith("chat"):
            path = "/v1/chat/completions"
            body = {"messages": [{"role": "user", "content": random.choice(PROMPTS)}]}
        else:
            path = "/v1/completions"
            body = {"prompt": random.choice(PROMPTS)}
        body.update({"max_tokens": n, "stream": stream, "temperature": 0.8})
        t0 = time.time()
        try:
            c, r = post(port, path, body)
            r.read()
            count(kind, r.status)
            if r.status == 200:
                with lock:
                    latencies[kind].append(time.time() - t0)
            c.close()
        except Exception as e:  # noqa: BLE001 - every failure is a figure
            error(kind, e)


def disconnect(port, stop):
    while not stop.is_set():
        try:
            body = {"prompt": "In the beginning", "max_tokens": 400, "stream": True,
                    "ignore_eos": True}
            c, r = post(port, "/v1/completions", body)
            count("disconnect", r.status)
            r.read1(256) if hasattr(r, "read1") else r.read(256)
            c.close()
        except Exception as e:  # noqa: BLE001
            error("disconnect", e)
        time.sleep(random.uniform(0.2, 1.0))


def drip(port, prefix, head, stop, kind):
    """Sends `prefix`, then `head` a byte a second until the server closes
    the socket."""
    while not stop.is_set():
        t0 = time.time()
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.settimeout(1)
            s.sendall(prefix)
            answer = b""
            for i in range(10_000):
                if stop.is_set():
                    break
                try:
                    s.sendall(head[i % len(head):i % len(head) + 1])
                except OSError:
                    break
                try:
                    d = s.recv(4096)
                    if not d:
                        break
                    answer += d
                except socket.timeout:
                    pass
            status = answer.split(b" ")[1].decode() if answer.startswith(b"HTTP/") else "closed"
            count(kind, status)
            with lock:
                latencies[kind].append(time.time() - t0)
            s.close()
        except Exception as e:  # noqa: BLE001
            error(kind, e)


def idle(port, stop):
    while not stop.is_set():
        t0 = time.time()
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.settimeout(120)
            d = s.recv(4096)
            count("idle", "closed" if not d else d.split(b" ")[1].decode())
            with lock:
                latencies["idle"].append(time.time() - t0)
            s.close()
        except Exception as e:  # noqa: BLE001
            error("idle", e)


def oversized(port, stop):
    too_big = b"x" * (9 << 20)
    verse = "In the beginning God created the heaven and the earth. "
    giant = {"messages": [{"role": "user", "content": verse * (7_900_000 // len(verse))}]}
    while not stop.is_set():
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            c.request("POST", "/v1/chat/completions", body=too_big,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            count("over-max-body", r.status)
            c.close()
        except Exception as e:  # noqa: BLE001
            error("over-max-body", e)
        try:
            c, r = post(port, "/v1/chat/completions", giant)
            r.read()
            count("giant-prompt", r.status)
            c.close()
        except Exception as e:  # noqa: BLE001
            error("giant-prompt", e)
        stop.wait(5)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default="target/release/clover")
    ap.add_argument("--model", help="default: the built-in default model")
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shutdown-timeout", type=float, default=10)
    ap.add_argument("--out", help="write the figures here as JSON")
    args = ap.parse_args()

    p, port, server_lines = start_server(args)
    # Warm-up, then the baseline RSS.
    for _ in range(4):
        c, r = post(port, "/v1/chat/completions",
                    {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})
        r.read()
    time.sleep(1)
    rss_start = rss_kb(p.pid)
    rss_peak = [rss_start]
    stop = threading.Event()
    crowd = (
        [threading.Thread(target=normal, args=(port, stop)) for _ in range(6)]
        + [threading.Thread(target=disconnect, args=(port, stop)) for _ in range(2)]
        + [threading.Thread(target=drip, args=(port, b"", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" * 50, stop, "slowloris")) for _ in range(40)]
        + [threading.Thread(target=idle, args=(port, stop)) for _ in range(100)]
        + [threading.Thread(target=drip, args=(port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n", b"{" * 100000, stop, "slow-body")) for _ in range(2)]
        + [threading.Thread(target=oversized, args=(port, stop))]
    )
    for t in crowd:
        t.daemon = True
        t.start()
    t_end = time.time() + args.minutes * 60
    next_report = time.time() + 60
    while time.time() < t_end:
        time.sleep(1)
        rss_peak.append(rss_kb(p.pid))
        if time.time() >= next_report:
            next_report += 60
            with lock:
                served = sum(v for (k, s), v in statuses.items() if s == 200)
            rss_by_minute.append(round(rss_peak[-1] / 1024, 1))
            left = (t_end - time.time()) / 60
            print(f"  {served} requests served, RSS {rss_peak[-1] // 1024} MiB, {left:.0f} min left",
                  flush=True)
    rss_end = rss_kb(p.pid)
    # SIGTERM with the crowd still at it.
    t0 = time.time()
    stopping.set()
    p.send_signal(signal.SIGTERM)
    try:
        code = p.wait(timeout=args.shutdown_timeout + 30)
    except subprocess.TimeoutExpired:
        p.kill()
        code = "killed (no exit within the grace period + 30 s)"
    exit_s = time.time() - t0
    stop.set()
    time.sleep(1)

    def lat(kind):
        xs = sorted(latencies.get(kind, []))
        if not xs:
            return None
        return {"n": len(xs), "p50_s": round(xs[len(xs) // 2], 3),
                "p99_s": round(xs[min(len(xs) - 1, int(len(xs) * 0.99))], 3),
                "max_s": round(xs[-1], 3)}

    with lock:
        figures = {
            "minutes": args.minutes,
            "responses": {f"{k} {s}": v for (k, s), v in sorted(statuses.items(), key=str)},
            "client_errors": {f"{k} {e}": v for (k, e), v in sorted(client_errors.items())},
            "latency": {k: lat(k) for k in sorted(latencies)},
            "rss_mib": {"start": round(rss_start / 1024, 1),
                        "peak": round(max(rss_peak) / 1024, 1),
                        "end": round(rss_end / 1024, 1),
                        "by_minute": rss_by_minute},
            "sigterm_to_exit_s": round(exit_s, 2),
            "exit_status": code,
            "server_errors_logged": [l.strip() for l in server_lines if "error" in l.lower()][:20],
        }
    print(json.dumps(figures, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(figures, f, indent=2)
    os._exit(0)


if __name__ == "__main__":
    main()
