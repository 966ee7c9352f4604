"""Two `clover serve` replicas behind nginx (Debian's), one killed halfway.

nginx balances with `least_conn` and passive health checks (`max_fails`,
`fail_timeout`, `proxy_next_upstream`); 40 streaming chat requests go
through it, 4 at a time, with the `openai` client. After the 20th has
finished, replica A is killed (SIGKILL, as a crash). Every request that starts
after the kill must succeed on replica B; requests streaming from A at the
moment of the kill may fail (their tokens were already being sent).

    python3 scripts/replicas_nginx.py [--model FILE] [--clover target/release/clover]

Needs nginx (`apt-get install nginx`) and `pip install openai`.
"""
import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import openai


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(url, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} not healthy in {timeout} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clover", default="target/release/clover")
    ap.add_argument("--model", help="GGUF file (default: a tiny synthetic qwen35moe)")
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=48)
    a = ap.parse_args()
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not os.path.exists(nginx):
        raise SystemExit("nginx is not installed: apt-get install nginx")
    work = tempfile.mkdtemp(prefix="clover-replicas-")
    model = a.model
    if model is None:
        model = os.path.join(work, "tiny.gguf")
        subprocess.run([a.clover, "synth", "--arch", "qwen35moe", "--preset", "tiny", "--recipe",
                        "q8_0", "-o", model], check=True, capture_output=True)
    ports = [free_port(), free_port()]
    front = free_port()
    replicas = []
    for name, port in zip("AB", ports):
        log = open(os.path.join(work, f"replica-{name}.log"), "w")
        p = subprocess.Popen([a.clover, "serve", "-m", model, "--port", str(port), "-np", "2",
                              "-t", "1", "--alias", f"replica-{name}"], stdout=log, stderr=log)
        replicas.append(p)
    for port in ports:
        wait_health(f"http://127.0.0.1:{port}/health")
    conf = os.path.join(work, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log;
daemon on;
events {{ worker_connections 256; }}
http {{
    access_log {work}/nginx-access.log;
    client_body_temp_path {work}/body;
    proxy_temp_path {work}/proxy;
    fastcgi_temp_path {work}/fastcgi;
    uwsgi_temp_path {work}/uwsgi;
    scgi_temp_path {work}/scgi;
    upstream clover {{
        least_conn;
        server 127.0.0.1:{ports[0]} max_fails=1 fail_timeout=30s;
        server 127.0.0.1:{ports[1]} max_fails=1 fail_timeout=30s;
    }}
    server {{
        listen 127.0.0.1:{front};
        location / {{
            proxy_pass http://clover;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 300s;
            proxy_next_upstream error timeout http_502 http_503;
            add_header X-Upstream $upstream_addr always;
        }}
    }}
}}
""")
    subprocess.run([nginx, "-c", conf, "-p", work], check=True)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{front}/v1", api_key="unused",
                           max_retries=0, timeout=120)
    results = []
    lock = threading.Lock()
    killed_at = [None]
    next_req = [0]

    def worker():
        while True:
            with lock:
                i = next_req[0]
                if i >= a.requests:
                    return
                next_req[0] += 1
            start = time.time()
            ok, served_by, err = False, "?", ""
            try:
                raw = client.chat.completions.with_raw_response.create(
                    model="any", messages=[{"role": "user", "content": f"Request {i}: tell me a story."}],
                    max_tokens=a.tokens, temperature=0, stream=True, extra_body={"ignore_eos": True})
                served_by = raw.headers.get("x-upstream", "?")
                n = 0
                for ch in raw.parse():
                    if ch.choices and ch.choices[0].delta.content:
                        n += 1
                ok = n > 0
            except Exception as e:  # noqa: BLE001 - report every failure
                err = type(e).__name__
            with lock:
                results.append((i, start, time.time(), ok, served_by, err))
                done = sum(1 for r in results if r[3] or r[5])
                if done == a.requests // 2 and killed_at[0] is None:
                    replicas[0].send_signal(signal.SIGKILL)
                    killed_at[0] = time.time()

    threads = [threading.Thread(target=worker) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    subprocess.run([nginx, "-c", conf, "-p", work, "-s", "stop"], check=False)
    for p in replicas:
        p.send_signal(signal.SIGTERM)
    for p in replicas:
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
    k = killed_at[0]
    after = [r for r in results if k is not None and r[1] > k]
    during = [r for r in results if k is not None and r[1] <= k < r[2]]
    by = {}
    for r in results:
        if r[3]:
            by[r[4]] = by.get(r[4], 0) + 1
    print(f"replicas: A on :{ports[0]} (killed after request {a.requests // 2}), B on :{ports[1]}; nginx on :{front}")
    print(f"requests: {len(results)}, succeeded: {sum(r[3] for r in results)}")
    print(f"in flight at the kill: {len(during)}, of which failed: {sum(not r[3] for r in during)}")
    print(f"started after the kill: {len(after)}, succeeded: {sum(r[3] for r in after)}")
    print("served by: " + ", ".join(f"{k}: {v}" for k, v in sorted(by.items())))
    shutil.rmtree(work, ignore_errors=True)
    if not after or not all(r[3] for r in after):
        sys.exit(1)


if __name__ == "__main__":
    main()
