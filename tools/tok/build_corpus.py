#!/usr/bin/env python3
"""tools/tok/build_corpus.py: builds the tokenizer test corpus from text
already on a Debian machine plus hand-written edge cases, in the record
format of tools/tok/oracle.js ("<byte length>\\n<bytes>" per document).

Sources, in order, until the size is reached: /usr/share/common-licenses,
/usr/share/doc/*/copyright, gzipped changelogs and man pages under
/usr/share/doc and /usr/share/man (decompressed), C headers under
/usr/include. Files are cut into documents of at most 16 KB (at a UTF-8
boundary when possible; raw bytes are kept, invalid UTF-8 included). The
edge cases (scripts, emoji/ZWJ, whitespace and digit runs, special-token
lookalikes, invalid UTF-8) come first.

  build_corpus.py OUT [--mb 5]
"""
import glob
import gzip
import os
import sys

EDGE = [
    "我爱北京天安门。日本語のテキスト、カタカナとひらがな。한국어 텍스트입니다.",
    "مرحبا بالعالم، هذا نصٌّ عربيٌّ مع تشكيل. ١٢٣٤٥٦",
    "नमस्ते दुनिया। यह हिंदी पाठ है। १२३४५ क्षत्रिय",
    "👩‍👩‍👧‍👦 family 🏳️‍🌈 flag 👍🏽 skin 🇩🇪🇯🇵 ❤️‍🔥 🧑🏿‍💻 1️⃣",
    "a" + " " * 300 + "b\n\n\n\t\t  \r\n  x  \n",
    "1234567890123456789 3.14159 1,000,000 0x7fff ٣٤٥ १२३",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<|endoftext|>",
    "<｜begin▁of▁sentence｜>Hi<｜User｜>q<｜Assistant｜> <s>[INST] x [/INST]</s>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "NFC: e\u0301 \u212b \u1100\u1161 A\u030a o\u0308\u0301 \ufb01 \u2160",
    "I'm you'RE they'Ll don't WE'VE it's he'd",
    "\ufeffBOM, NEL\x85here, NBSP\xa0there, ideographic\u3000space",
]
INVALID = [b"invalid: \xff\xfe abc \xc3\x28 \xe2\x82 \xf0\x9f\x98 end \xed\xa0\x80 \xc0\xaf",
           b"\x80\x80 \xf4\x90\x80\x80 \xe0\x80\x80 tail\xe4"]


def files():
    yield from sorted(glob.glob("/usr/share/common-licenses/*"))
    yield from sorted(glob.glob("/usr/share/doc/*/copyright"))
    yield from sorted(glob.glob("/usr/share/doc/*/changelog*.gz"))
    yield from sorted(glob.glob("/usr/share/man/man1/*.gz"))
    yield from sorted(glob.glob("/usr/share/man/*/man1/*.gz"))  # translated man pages
    yield from sorted(glob.glob("/usr/include/*.h"))


def read(p):
    try:
        if p.endswith(".gz"):
            with gzip.open(p, "rb") as f:
                return f.read()
        with open(p, "rb") as f:
            return f.read()
    except (OSError, EOFError):
        return b""


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out = sys.argv[1]
    mb = float(sys.argv[sys.argv.index("--mb") + 1]) if "--mb" in sys.argv else 5.0
    target = int(mb * 1024 * 1024)
    docs = [e.encode("utf-8") for e in EDGE] + INVALID
    total = sum(len(d) for d in docs)
    for p in files():
        if total >= target:
            break
        if not os.path.isfile(p):
            continue
        data = read(p)
        i = 0
        while i < len(data) and total < target:
            j = min(len(data), i + 16384)
            k = j
            while k > i and k < len(data) and (data[k] & 0xC0) == 0x80:
                k -= 1  # cut before a continuation byte
            j = k if k > i else j
            docs.append(data[i:j])
            total += j - i
            i = j
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        for d in docs:
            f.write(b"%d\n" % len(d))
            f.write(d)
    os.replace(tmp, out)
    print(f"{out}: {len(docs)} documents, {total / 1048576:.2f} MiB", file=sys.stderr)


if __name__ == "__main__":
    main()
