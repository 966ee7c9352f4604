"""Forced tool calls through the clients people use, against a running
`clover serve` with a tool-call chat template (tests/server.rs starts it and
runs this with its base URL): the official `openai` and `anthropic` clients,
litellm and langchain-openai. Each forced call must parse into the client's
tool-call object, with arguments valid for the tool's schema, streamed and not.
Exits non-zero on any failure, printing what failed.

    python3 tests/server_tools.py http://127.0.0.1:PORT
"""
import json
import os
import sys

# litellm would fetch its price list and tokenizers from the network.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["LITELLM_OFFLINE_MODE"] = "true"

import anthropic
import openai

base = sys.argv[1]
SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "days": {"type": "integer"},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "days", "unit"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                      "parameters": SCHEMA}},
    {"type": "function", "function": {"name": "get_time", "description": "The time in a zone",
                                      "parameters": {"type": "object",
                                                     "properties": {"zone": {"type": "string", "maxLength": 8}},
                                                     "required": ["zone"]}}},
]
MSGS = [{"role": "user", "content": "What is the weather in Paris?"}]


def valid(name, args):
    """The arguments follow the named tool's schema."""
    if name == "get_weather":
        assert set(args) == {"city", "days", "unit"}, args
        assert isinstance(args["city"], str) and len(args["city"]) <= 12, args
        assert isinstance(args["days"], int) and not isinstance(args["days"], bool), args
        assert args["unit"] in ("celsius", "fahrenheit"), args
    else:
        assert name == "get_time", name
        assert set(args) == {"zone"} and isinstance(args["zone"], str) and len(args["zone"]) <= 8, args


# OpenAI: "required", and a named function, streamed and not.
client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused")
for choice, want in [("required", None), ({"type": "function", "function": {"name": "get_time"}}, "get_time")]:
    r = client.chat.completions.create(model="any", messages=MSGS, tools=TOOLS, tool_choice=choice,
                                       max_tokens=200, temperature=0)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls" and c.message.tool_calls, c
    call = c.message.tool_calls[0]
    assert want is None or call.function.name == want, call
    valid(call.function.name, json.loads(call.function.arguments))
    name, args = None, ""
    for chunk in client.chat.completions.create(model="any", messages=MSGS, tools=TOOLS, tool_choice=choice,
                                                max_tokens=200, temperature=0, stream=True):
        for d in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            name = d.function.name or name
            args += d.function.arguments or ""
    assert name == call.function.name, (name, call)
    valid(name, json.loads(args))

# "none": no call, even with tools given.
r = client.chat.completions.create(model="any", messages=MSGS, tools=TOOLS, tool_choice="none",
                                   max_tokens=8, temperature=0)
assert not r.choices[0].message.tool_calls, r

# A named function that is not among the tools is a 400 naming the field.
try:
    client.chat.completions.create(model="any", messages=MSGS, tools=TOOLS, max_tokens=8,
                                   tool_choice={"type": "function", "function": {"name": "nope"}})
    raise AssertionError("an unknown function was accepted")
except openai.BadRequestError as e:
    assert e.body["param"] == "tool_choice", e.body

# Anthropic: "any" and a named tool, streamed and not.
ac = anthropic.Anthropic(base_url=base, api_key="unused")
atools = [{"name": t["function"]["name"], "description": t["function"]["description"],
           "input_schema": t["function"]["parameters"]} for t in TOOLS]
for choice, want in [({"type": "any"}, None), ({"type": "tool", "name": "get_weather"}, "get_weather")]:
    m = ac.messages.create(model="any", max_tokens=200, messages=MSGS, tools=atools, tool_choice=choice,
                           extra_body={"temperature": 0})
    uses = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and uses, m
    assert want is None or uses[0].name == want, uses
    valid(uses[0].name, uses[0].input)
    with ac.messages.stream(model="any", max_tokens=200, messages=MSGS, tools=atools, tool_choice=choice,
                            extra_body={"temperature": 0}) as s:
        final = s.get_final_message()
    uses = [b for b in final.content if b.type == "tool_use"]
    assert final.stop_reason == "tool_use" and uses, final
    valid(uses[0].name, uses[0].input)

# litellm, as an OpenAI-compatible provider.
import litellm  # noqa: E402

r = litellm.completion(model="openai/any", api_base=f"{base}/v1", api_key="unused", messages=MSGS,
                       tools=TOOLS, tool_choice="required", max_tokens=200, temperature=0)
call = r.choices[0].message.tool_calls[0]
valid(call.function.name, json.loads(call.function.arguments))

# langchain-openai: bind_tools(tool_choice="required").
from langchain_openai import ChatOpenAI  # noqa: E402

llm = ChatOpenAI(base_url=f"{base}/v1", api_key="unused", model="any", max_tokens=200, temperature=0)
msg = llm.bind_tools(TOOLS, tool_choice="required").invoke("What is the weather in Paris?")
assert msg.tool_calls, msg
valid(msg.tool_calls[0]["name"], msg.tool_calls[0]["args"])
print("tool calls: all checks passed")
