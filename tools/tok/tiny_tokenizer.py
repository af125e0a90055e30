#!/usr/bin/env python3
"""tools/tok/tiny_tokenizer.py: writes a tiny byte-level tokenizer.json and a
tokenizer_config.json with a chat template into DIR (a synthetic model
directory), so the CLI chat path can be tested without a real checkpoint.

  tiny_tokenizer.py DIR [--xtml]
--xtml: Kimi K3's chat format instead: its four markers as special tokens
(264-267) and an XTML template whose generation prompt opens the think
channel; written as chat_template.jinja (as K3 takes it, docs/TOKENIZER.md).
"""
import json, sys
def printable(b): return 33 <= b <= 126 or 0xA1 <= b <= 0xAC or b >= 0xAE
vocab = {}
for b in range(256):
    cp = b if printable(b) else 256 + sum(1 for c in range(b) if not printable(c))
    vocab[chr(cp)] = b
vocab.update({"he": 256, "ll": 257, "hell": 258, "\u0120w": 259, "hello": 260, "lo": 261})
tj = {"added_tokens": [{"id": 262, "content": "<|end|>", "special": True}, {"id": 263, "content": "<|user|>", "special": True}],
      "normalizer": None,
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
      "decoder": {"type": "ByteLevel"}, "post_processor": None,
      "model": {"type": "BPE", "vocab": vocab, "merges": ["h e", "l l", "he ll", "\u0120 w", "hell o", "l o"]}}
cfg = {"eos_token": "<|end|>", "bos_token": None,
       "chat_template": "{% for m in messages %}{{ '<|user|>' if m.role == 'user' else '' }}{{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}{{ '\\n' }}{% endif %}"}
d = sys.argv[1]
if sys.argv[2:] == ["--xtml"]:
    for i, m in enumerate(["<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"]):
        tj["added_tokens"].append({"id": 264 + i, "content": m, "special": True})
    del cfg["chat_template"]
    open(d + "/chat_template.jinja", "w").write(
        "{%- for m in messages -%}<|open|>message role=\"{{ m.role }}\"<|sep|>{{ m.content }}"
        "<|close|>message<|sep|><|end_of_msg|>{%- endfor -%}"
        "{%- if add_generation_prompt -%}<|open|>message role=\"assistant\"<|sep|><|open|>think<|sep|>"
        "{%- endif -%}")
json.dump(tj, open(d + "/tokenizer.json", "w"))
json.dump(cfg, open(d + "/tokenizer_config.json", "w"))
