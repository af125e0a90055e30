#!/usr/bin/python3
"""tools/peers/gptoss_tok_oracle.py: gpt-oss's tokenizer (o200k_harmony) read
by spill from both forms users have, against tiktoken and llama.cpp
(docs/PEERS.md "gpt-4o tokenizer (gpt-oss)").

Builds the real vocabulary at test time from npm's js-tiktoken o200k_base
ranks (tools/tok/gptoss_tokenizer.js: the Hugging Face checkpoint's
tokenizer.json + tokenizer_config.json, 199,998 ranks, 446,189 merges, the
1,090 harmony special tokens), the GGUF llama.cpp's converter makes of that
directory (tools/tok/hf_to_gguf_tokenizer.py: tokens by id, specials as
control tokens, the tokenizer.json merges, tokenizer.ggml.pre "gpt-4o"), and
tokenizes held-out documents (special tokens parsed) with
  - js-tiktoken with o200k_harmony's specials (tools/tok/oracle.js gptoss):
    the tokenizer gpt-oss was trained with, the truth;
  - spill tokenize on the checkpoint directory and on the GGUF: must equal
    tiktoken on every document;
  - llama_peer tokenize on the GGUF (llama.cpp de3ff81): must equal
    tiktoken run with llama.cpp's rewrite of the o200k split (oracle.js
    gptoss-llamacpp) on every document, which says that llama.cpp parts from
    tiktoken exactly where its regex does (combining marks \\p{M} are not
    letters there, so Indic vowel signs split words); the documents where it
    does are counted and printed.

  gptoss_tok_oracle.py SPILL LLAMA_PEER NPM_DIR WORKDIR
Exit 1 on any mismatch of the above.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOK = os.path.join(HERE, "..", "tok")

# Held out: none of these was used while writing the code they check.
DOCS = [
    "Hello, world! How's it going? I'd've thought THEY'LL say WE'RE late.",
    "ÉCOLE NORMALE SUPÉRIEURE, Ĳsselmeer, ǅemal and ǈubljana: İstanbul ıi",
    "naïve café façade coöperate — résumé, jalapeño, Zürich, Øresund, Łódź",
    "decomposed: cafe\u0301 nai\u0308ve A\u030a ñ vs n\u0303",
    "हिन्दी में लिखा गया वाक्य। क्षत्रिय ज्ञान",
    "தமிழ் மொழி வாழ்க; ಕನ್ನಡ ಭಾಷೆ; বাংলা লিপি",
    "ไทย ภาษาไทย ที่มีวรรณยุกต์ ๑๒๓",
    "日本語の文章です。漢字とカタカナ、ひらがな。中文句子，还有標點！한국어 문장",
    "Ελληνικά: ΑΘΗΝΑ και Αθήνα; Русский: МОСКВА и Москва; עברית ואנגלית",
    "numbers 0 12 345 6789 1234567890 3.14159 -2.5e-10 1,000,000 ٣٤٥ ১২৩ ⅫⅣ ²³",
    "tabs\tand\t\tspaces    then\n\n\nnewlines\r\n\r\nand   trailing   \n   ",
    " \u00a0\u2003\u3000 odd spaces\u2028line sep\u0085nel",
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n-1) + fib(n-2)\n",
    "for (int i = 0; i < n; ++i) { a[i] = b[i] * c; } // loop\n/* block */ x->y = &z;",
    "https://example.com/path/to/file.html?query=1&x=y#frag  C:\\\\Users\\\\me\\\\file.txt",
    "emoji 😀🎉 family 👨‍👩‍👧 flag 🇫🇷 skin 👋🏾 keycap #️⃣",
    "<|start|>system<|message|>You are ChatGPT.<|end|><|start|>user<|message|>Hi<|end|>",
    "<|start|>assistant<|channel|>analysis<|message|>think<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Answer.<|return|>",
    "<|start|>assistant to=functions.get<|channel|>commentary <|constrain|>json"
    "<|message|>{\"x\": 1}<|call|>",
    "<|startoftext|>a<|endoftext|>b<|endofprompt|>c<|reserved_200017|>d<|reserved_201087|>",
    "not special: <|start| <start|> <|message |> <|reserved_999999|> <|",
    "'s 'T 'Re 've 'M 'LL 'd ’s don't DON'T o'clock rock'n'roll",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa " + "ab" * 40 + " " + "1" * 50,
    "",
]


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def oracle(npm, family, docs_file, specials):
    r = run(["node", os.path.join(TOK, "oracle.js"), npm, family, docs_file, specials])
    if r.returncode != 0:
        print("FAIL oracle.js %s: %s" % (family, r.stderr.strip()[-400:]))
        sys.exit(1)
    return [json.loads(line)["ids"] for line in r.stdout.splitlines()]


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    spill, peer, npm, work = sys.argv[1:]
    ckpt = os.path.join(work, "gptoss")
    r = run(["node", os.path.join(TOK, "gptoss_tokenizer.js"), npm, ckpt])
    if r.returncode != 0:
        print("FAIL gptoss_tokenizer.js: %s" % r.stderr.strip()[-400:])
        sys.exit(1)
    print("tokenizer files:", r.stdout.strip())
    gguf = os.path.join(work, "gptoss-tok.gguf")
    r = run(["/usr/bin/python3", os.path.join(TOK, "hf_to_gguf_tokenizer.py"),
             os.path.join(ckpt, "tokenizer.json"), "gpt-4o", gguf, "--llama-loadable"])
    if r.returncode != 0:
        print("FAIL hf_to_gguf_tokenizer.py: %s" % r.stderr.strip()[-400:])
        sys.exit(1)
    docs_file = os.path.join(work, "docs.bin")
    with open(docs_file, "wb") as f:
        for d in DOCS:
            b = d.encode()
            f.write(b"%d\n" % len(b) + b)
    specials = os.path.join(ckpt, "specials.json")
    truth = oracle(npm, "gptoss", docs_file, specials)
    emul = oracle(npm, "gptoss-llamacpp", docs_file, specials)
    r = run([peer, "tokenize", gguf, "--docs", docs_file, "--special"])
    if r.returncode != 0:
        print("FAIL llama_peer tokenize: %s" % r.stderr.strip()[-400:])
        sys.exit(1)
    llama = [[int(x) for x in line.split(",")] if line else []
             for line in r.stdout.split("\n")[:len(DOCS)]]
    bad = 0
    same = {"hf": 0, "gguf": 0}
    for i, d in enumerate(DOCS):
        p = os.path.join(work, "doc%d.txt" % i)
        with open(p, "wb") as f:
            f.write(d.encode())
        for name, src in (("hf", ckpt), ("gguf", gguf)):
            s = run([spill, "tokenize", src, "--file", p, "--json"])
            got = json.loads(s.stdout)["ids"] if s.returncode == 0 else s.stderr.strip()[-200:]
            if got == truth[i]:
                same[name] += 1
            else:
                bad += 1
                print("FAIL spill (%s) doc %d %r: %s, tiktoken %s" % (name, i, d[:40], got, truth[i]))
        if llama[i] != emul[i]:
            bad += 1
            print("FAIL llama.cpp doc %d %r: %s, tiktoken with llama.cpp's split %s"
                  % (i, d[:40], llama[i], emul[i]))
    parts = [i for i in range(len(DOCS)) if llama[i] != truth[i]]
    print("spill = tiktoken: %d of %d documents (checkpoint directory), %d of %d (GGUF gpt-4o)"
          % (same["hf"], len(DOCS), same["gguf"], len(DOCS)))
    print("llama.cpp = tiktoken with llama.cpp's split: %d of %d; llama.cpp = tiktoken: %d of %d"
          " (differs on documents %s)" % (sum(llama[i] == emul[i] for i in range(len(DOCS))),
                                          len(DOCS), len(DOCS) - len(parts), len(DOCS), parts))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
