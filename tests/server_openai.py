"""The official `openai` client against a running `clover serve` (tests/server.rs
starts the server and runs this with its base URL). Exits non-zero on any
failure, printing what failed.

    python3 tests/server_openai.py http://127.0.0.1:PORT/v1
"""
import re
import sys
import threading

import openai

base = sys.argv[1]
client = openai.OpenAI(base_url=base, api_key="unused")
MSGS = [{"role": "user", "content": "Tell me about the light."}]


def chat(**kw):
    return client.chat.completions.create(model="any", messages=MSGS, temperature=0, **kw)


# Chat, not streamed: the text, the usage, llama-server's timings.
r = chat(max_tokens=12)
alone = r.choices[0].message.content
assert r.object == "chat.completion", r
assert r.choices[0].finish_reason in ("length", "stop"), r
assert r.usage.completion_tokens <= 12 and r.usage.prompt_tokens > 0, r.usage
assert r.model_extra["timings"]["predicted_n"] == r.usage.completion_tokens, r.model_extra

# Chat, streamed with usage: the same greedy text as the whole response.
parts, usage, finish = [], None, None
for ch in chat(max_tokens=12, stream=True, stream_options={"include_usage": True}):
    if ch.usage:
        usage = ch.usage
    for c in ch.choices:
        parts.append(c.delta.content or "")
        finish = c.finish_reason or finish
assert "".join(parts) == alone, ("stream differs", "".join(parts), alone)
assert usage is not None and usage.completion_tokens == r.usage.completion_tokens, usage
assert finish == r.choices[0].finish_reason, finish

# Completions, both ways.
c = client.completions.create(model="any", prompt="In the beginning", max_tokens=8, temperature=0)
assert c.object == "text_completion" and c.usage.completion_tokens <= 8, c
completion_text = c.choices[0].text
streamed = "".join(
    x.choices[0].text
    for x in client.completions.create(
        model="any", prompt="In the beginning", max_tokens=8, temperature=0, stream=True
    )
    if x.choices
)
assert streamed == c.choices[0].text, (streamed, c.choices[0].text)

# Stop strings: nothing from the stop string on.
if len(alone) > 4:
    stop = alone[2:4]
    s = chat(max_tokens=12, stop=[stop]).choices[0]
    assert stop not in s.message.content and s.finish_reason == "stop", s

# Tools: the round trip a tool-using client makes (the template renders the
# tools, the assistant's call and the tool's result; the reply is whatever
# this random-weight model says).
tools = [{"type": "function", "function": {
    "name": "get_verse", "description": "Look up a verse",
    "parameters": {"type": "object", "properties": {"ref": {"type": "string"}}, "required": ["ref"]}}}]
msgs = MSGS + [
    {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "get_verse", "arguments": "{\"ref\": \"John 1:5\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "And the light shineth in darkness."},
]
t = client.chat.completions.create(model="any", messages=msgs, tools=tools, max_tokens=6, temperature=0)
assert t.choices[0].finish_reason in ("length", "stop", "tool_calls"), t

# Log-probabilities: the typed objects, the same values streamed and not,
# the greedy token on top of its alternatives.
lp = chat(max_tokens=12, logprobs=True, top_logprobs=3)
content = lp.choices[0].logprobs.content
assert lp.choices[0].message.content == alone and content, lp
# Control tokens (this random model emits some) are reported by name but
# never shown as content.
shown = [e for e in content if not re.fullmatch(r"<\|[^|]*\|>", e.token)]
joined = b"".join(bytes(e.bytes) for e in shown).decode("utf-8", errors="replace")
assert joined == alone, (joined, alone)
for e in content:
    assert len(e.top_logprobs) == 3 and e.top_logprobs[0].token == e.token, e
    assert e.logprob <= 0 and e.top_logprobs[0].logprob >= e.top_logprobs[2].logprob, e
streamed_lp = [
    (x.token, x.logprob)
    for ch in chat(max_tokens=12, logprobs=True, top_logprobs=3, stream=True)
    for c in ch.choices
    if c.logprobs and c.logprobs.content
    for x in c.logprobs.content
]
assert streamed_lp == [(e.token, e.logprob) for e in content], (streamed_lp, content)
cl = client.completions.create(model="any", prompt="In the beginning", max_tokens=8, temperature=0, logprobs=2)
lps = cl.choices[0].logprobs
joined = "".join(t for t in lps.tokens if not re.fullmatch(r"<\|[^|]*\|>", t))
assert cl.choices[0].text == completion_text and (joined == completion_text or "\ufffd" in joined), lps
assert len(lps.tokens) == len(lps.token_logprobs) == len(lps.top_logprobs) == len(lps.text_offset), lps
assert all(len(t) <= 2 for t in lps.top_logprobs) and lps.text_offset[0] == 0, lps

# lm-eval's loglikelihood request: the prompt echoed and scored, token ids
# and several prompts in one request.
e = client.completions.create(model="any", prompt="In the beginning", max_tokens=1, temperature=0,
                              logprobs=1, echo=True)
el = e.choices[0].logprobs
assert e.choices[0].text.startswith("In the beginning") and el.token_logprobs[0] is None, el
assert all(x is not None and x <= 0 for x in el.token_logprobs[1:]), el
assert len(el.tokens) == e.usage.prompt_tokens + e.usage.completion_tokens, (el, e.usage)
two = client.completions.create(model="any", prompt=["In the beginning", [1, 2, 3]], max_tokens=4,
                                temperature=0)
head = two.choices[0].text.rstrip("\ufffd")
assert [c.index for c in two.choices] == [0, 1] and completion_text.startswith(head), two

# Errors come back as the client's exceptions with the right status.
try:
    client.chat.completions.create(model="any", messages=MSGS, n=2)
    raise AssertionError("n=2 was accepted")
except openai.BadRequestError as e:
    assert e.status_code == 400 and "n = 1" in str(e), e

# models.retrieve: the listed model, and 404 for another.
listed = client.models.list().data[0].id
assert client.models.retrieve(listed).id == listed
try:
    client.models.retrieve("no-such-model")
    raise AssertionError("an unknown model was retrieved")
except openai.NotFoundError as e:
    assert e.status_code == 404, e

# Sampling values outside their range are 400s naming the field.
for field, value in [("temperature", -1), ("top_p", -1), ("min_p", 5), ("presence_penalty", 3)]:
    try:
        client.chat.completions.create(model="any", messages=MSGS, max_tokens=2,
                                       extra_body={field: value})
        raise AssertionError(f"{field}={value} was accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == field, (field, e.body)

# Eight concurrent streams: each greedy text equals the one made alone.
results = [None] * 8


def worker(i):
    results[i] = "".join(
        c.choices[0].delta.content or ""
        for c in chat(max_tokens=12, stream=True)
        if c.choices
    )


threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
for th in threads:
    th.start()
for th in threads:
    th.join()
assert all(x == alone for x in results), ("concurrent greedy differs", results, alone)
print("openai client: all checks passed")
