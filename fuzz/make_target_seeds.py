"""Writes seed inputs for the tokenizer_meta, chat_template and tensor_forward fuzz targets
(layouts: the doc comment at the top of each target).

    python3 fuzz/make_target_seeds.py fuzz/corpus
"""
import os
import re
import struct
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
out = sys.argv[1]


def write(target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


# tokenizer_meta: flags, bos, eos, pad, mask, then tokens \0 types \0 merges \0 text \0 ids.
words = ['he', 'll', 'hell', 'hello', 'Ġw', 'or', 'Ġwor', 'ld', 'Ġworld',
         '<|im_start|>', '<|im_end|>', '<|mask|>', '<|endoftext|>']
base = 256  # the target prepends 256 byte tokens when flag bit 4 is set
ids = struct.pack('<' + 'H' * 6, 104, 101, base + 3, base + 8, base + 9, 300)
types = bytes([1] * 9 + [3, 3, 4, 3])
merges = 'h e\nl l\nhe ll\nhell o\nĠ w\no r\nĠw or\nl d\nĠwor ld'
text = '<|im_start|>user\nhello world<|im_end|> 123 héllo\r\n\t!'
write('tokenizer_meta', 'seed0', bytes([0b11100 & 0x1f | 16 | 8 | 4, 0xFF, base + 10 - 256, 0xFF, 0xFF])
      + '\n'.join(words).encode() + b'\0' + b'\1' * 256 + types + b'\0'
      + merges.encode() + b'\0' + text.encode() + b'\0' + ids)
write('tokenizer_meta', 'seed1', bytes([1 | 2 | 16, 0, 1, 2, 3])
      + b'a\nb\nab' + b'\0\0' + b'a b' + b'\0' + b'abab ba' + b'\0' + b'\0\0\1\0\2\0')

# chat_template: template \0 messages (role byte + text); last byte picks the flags.
src = open(os.path.join(root, 'src', 'chat.rs'), encoding='utf-8').read()
src += open(os.path.join(root, 'src', 'chat_tests.rs'), encoding='utf-8').read()
templates = re.findall(r'r#"(\{%-? set ns.*?)"#', src, re.S)
templates += [
    "{%- for message in messages -%}{{- '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>\\n' -}}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}",
    "{{ messages|tojson(indent=2) }}{% macro f(n) %}{{ f(n - 1) }}{% endmacro %}",
    "{% set s = 'ab' %}{% for i in range(3) %}{% set s = s ~ s %}{% endfor %}{{ s }}",
]
msgs = b'\0' + b'\0You are helpful.' + b'\0\1Hi <think>x</think>' \
    + b'\0' + bytes([0x82]) + b'thought\n</think>answer' + b'\0\3<tool_response>r</tool_response>'
for i, t in enumerate(templates):
    write('chat_template', f'seed{i}', t.encode() + msgs + bytes([i % 8]))

# tensor_forward: recipe, token (u16), offset (u32), bytes written at the offset.
for r in range(5):
    write('tensor_forward', f'seed{r}', bytes([r]) + struct.pack('<HI', 5, 0) + bytes(range(64)))
write('tensor_forward', 'nan', bytes([0]) + struct.pack('<HI', 7, 1000) + b'\xff\xff\xff\x7f' * 8)
print('seeds written to', out)
