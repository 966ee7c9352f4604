"""A long prompt arriving while other users decode: what it costs them and
what it waits. Starts D streaming clients (short prompts, greedy, N tokens
each, `ignore_eos`); once every one of them has its first token, sends one
request whose prompt is P words long and times its first token. Reports,
for the decoding clients, the tokens they received while the long prompt
was evaluated (from its send to its first token) and their longest gap
between two tokens; for the long request, its time to first token; and when
the last of them all was done.
Works against `clover serve` and `llama-server` alike.

    python3 scripts/serve_mixed.py http://127.0.0.1:8080/v1 -d 3 -n 96 -p 400
"""
import argparse
import threading
import time

import openai

WORDS = ("the river ran past the old mill where the miller kept his ledgers of "
         "grain and flour and the names of every farmer who came down the valley "
         "road in autumn with carts of wheat and barley").split()


def decoder(client, i, n, stamps, started):
    stream = client.completions.create(
        model="any", prompt=f"Story number {i}: once upon a time", max_tokens=n,
        temperature=0, stream=True, extra_body={"ignore_eos": True})
    for ch in stream:
        if ch.choices and ch.choices[0].text:
            stamps.append(time.perf_counter())
            if len(stamps) == 1:
                started.release()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("-d", type=int, default=3, help="decoding clients")
    ap.add_argument("-n", type=int, default=96, help="tokens per decoding client")
    ap.add_argument("-p", type=int, default=400, help="words in the long prompt")
    a = ap.parse_args()
    client = openai.OpenAI(base_url=a.base, api_key="unused", timeout=3600)
    stamps = [[] for _ in range(a.d)]
    started = threading.Semaphore(0)
    threads = [threading.Thread(target=decoder, args=(client, i, a.n, stamps[i], started))
               for i in range(a.d)]
    for t in threads:
        t.start()
    for _ in range(a.d):
        started.acquire()
    prompt = " ".join(WORDS[i % len(WORDS)] for i in range(a.p))
    t0 = time.perf_counter()
    stream = client.completions.create(model="any", prompt=prompt, max_tokens=4,
                                       temperature=0, stream=True,
                                       stream_options={"include_usage": True},
                                       extra_body={"ignore_eos": True})
    ttft, n_prompt = None, None
    for ch in stream:
        if ttft is None and ch.choices and ch.choices[0].text:
            ttft = time.perf_counter() - t0
        if ch.usage:
            n_prompt = ch.usage.prompt_tokens
    t1 = t0 + ttft
    for t in threads:
        t.join()
    wall = max(st[-1] for st in stamps) - t0
    during = sum(sum(1 for s in st if t0 <= s <= t1) for st in stamps)
    gaps = [b - a for st in stamps for a, b in zip(st, st[1:])]
    print(f"long prompt: {n_prompt} tokens, time to first token {ttft:.2f} s; "
          f"{a.d} decoding clients got {during} tokens meanwhile "
          f"({during / ttft:.2f} t/s), longest gap between two tokens {max(gaps):.2f} s; "
          f"everything done {max(wall, ttft):.2f} s after the long prompt was sent")


if __name__ == "__main__":
    main()
