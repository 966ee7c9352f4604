"""The official `anthropic` client against a running `clover serve`'s Messages
API (tests/server.rs starts the server and runs this with its base URL). Exits
non-zero on any failure, printing what failed.

    python3 tests/server_anthropic.py http://127.0.0.1:PORT
"""
import sys

import anthropic

client = anthropic.Anthropic(base_url=sys.argv[1], api_key="sesame")
MSGS = [{"role": "user", "content": "Tell me about the light."}]

# Not streamed: the text, the usage, how it stopped.
m = client.messages.create(model="any", max_tokens=12, extra_body={"temperature": 0}, messages=MSGS,
                           system="You are brief.")
assert m.type == "message" and m.role == "assistant", m
assert m.stop_reason in ("max_tokens", "end_turn"), m
texts = [b.text for b in m.content if b.type == "text"]
assert len(texts) == 1, m
alone = texts[0]
assert 0 < m.usage.output_tokens <= 12 and m.usage.input_tokens > 0, m.usage

# Streamed through the client's event parser: the same greedy text.
with client.messages.stream(model="any", max_tokens=12, extra_body={"temperature": 0}, messages=MSGS,
                            system="You are brief.") as s:
    streamed = "".join(s.text_stream)
    final = s.get_final_message()
assert streamed == alone, (streamed, alone)
assert final.stop_reason == m.stop_reason and final.usage.output_tokens == m.usage.output_tokens, final

# A stop sequence taken from the reply.
if len(alone) > 4:
    word = alone[2:4]
    st = client.messages.create(model="any", max_tokens=12, extra_body={"temperature": 0}, messages=MSGS,
                                system="You are brief.", stop_sequences=[word])
    assert st.stop_reason == "stop_sequence" and st.stop_sequence == word, st
    assert word not in st.content[0].text, st

# The tools round trip: tools rendered, an assistant tool_use and the user's
# tool_result sent back.
tools = [{"name": "get_verse", "description": "Look up a verse",
          "input_schema": {"type": "object", "properties": {"ref": {"type": "string"}}}}]
msgs = MSGS + [
    {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "get_verse", "input": {"ref": "John 1:5"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "And the light shineth in darkness."}]},
]
t = client.messages.create(model="any", max_tokens=6, extra_body={"temperature": 0}, messages=msgs, tools=tools)
assert t.stop_reason in ("max_tokens", "end_turn", "tool_use"), t

# count_tokens: the prompt tokens a request with these messages takes.
counted = client.messages.count_tokens(model="any", messages=MSGS).input_tokens
made = client.messages.create(model="any", max_tokens=1, messages=MSGS)
assert counted == made.usage.input_tokens > 0, (counted, made.usage)

# Errors are the client's exceptions with the right status.
try:
    client.messages.create(model="any", max_tokens=4, messages=[{"role": "system", "content": "x"}])
    raise AssertionError("a system-role message was accepted")
except anthropic.BadRequestError as e:
    assert e.status_code == 400 and e.body["error"]["type"] == "invalid_request_error", e.body
try:
    anthropic.Anthropic(base_url=sys.argv[1], api_key="wrong").messages.create(
        model="any", max_tokens=4, messages=MSGS)
    raise AssertionError("a wrong key was accepted")
except anthropic.AuthenticationError as e:
    assert e.status_code == 401, e
print("anthropic client: all checks passed")
