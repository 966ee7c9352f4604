"""Drives an OpenAI-compatible server with N concurrent streaming clients and
reports aggregate generated tokens per second, time to first token (p50, p99)
and per-stream tokens per second. Works against `clover serve` and
`llama-server` alike (fixed prompts, greedy, a fixed number of tokens each:
`ignore_eos`).

    python3 scripts/serve_bench.py http://127.0.0.1:8080/v1 -c 1,4,8 -n 128
"""
import argparse
import statistics
import threading
import time

import openai

PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a bicycle stays upright.",
    "List ten uses for a paperclip.",
    "Describe the water cycle to a child.",
    "What makes a good cup of tea?",
    "Summarise the plot of a heist film.",
    "Give advice to a new gardener.",
    "Describe a city at night.",
]


def one(client, prompt, n, out):
    t0 = time.perf_counter()
    first = None
    count = 0
    stream = client.chat.completions.create(
        model="any", messages=[{"role": "user", "content": prompt}], max_tokens=n,
        temperature=0, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True})
    for ch in stream:
        if ch.choices and (ch.choices[0].delta.content or "") and first is None:
            first = time.perf_counter() - t0
        if ch.usage:
            count = ch.usage.completion_tokens
    total = time.perf_counter() - t0
    out.append((first if first is not None else total, total, count))


def run(base, clients, n):
    client = openai.OpenAI(base_url=base, api_key="unused", timeout=3600)
    out = []
    threads = [threading.Thread(target=one, args=(client, PROMPTS[i % len(PROMPTS)], n, out))
               for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    toks = sum(c for _, _, c in out)
    ttft = sorted(f for f, _, _ in out)
    p99 = ttft[min(len(ttft) - 1, int(round(0.99 * (len(ttft) - 1))))]
    per = [c / max(tot - f, 1e-9) for f, tot, c in out]
    return toks / wall, statistics.median(ttft), p99, statistics.median(per), toks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("-c", "--clients", default="1,4,8")
    ap.add_argument("-n", "--tokens", type=int, default=128)
    ap.add_argument("--label", default="server")
    a = ap.parse_args()
    print("| server | clients | aggregate t/s | TTFT p50 s | TTFT p99 s | per-stream t/s | tokens |")
    print("|---|--:|--:|--:|--:|--:|--:|")
    for c in [int(x) for x in a.clients.split(",")]:
        agg, p50, p99, per, toks = run(a.base, c, a.tokens)
        print(f"| {a.label} | {c} | {agg:.2f} | {p50:.2f} | {p99:.2f} | {per:.2f} | {toks} |", flush=True)


if __name__ == "__main__":
    main()
