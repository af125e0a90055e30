#!/usr/bin/python3
"""bench/swa_kv_chat.py: a gpt-oss-style chat through `spill serve`, per turn,
for each swa_kv setting (docs/MODEL.md "Sliding-window KV").

gpt-oss's harmony template drops a previous turn's analysis: the next prompt
is the conversation so far with only the reply's final message, so it leaves
the held conversation (prompt + generated tokens) right where the reply
began. Here the model is a random `spill gen --attn gptoss` model with a byte
vocabulary, so the reply is random bytes; the next prompt carries a fixed
"final" text in its place, which leaves the held conversation at the same
point (the prompt's end), as harmony does.

Per turn it reads the server's /metrics before and after the request:
tokens prefilled (spill_prompt_tokens_total), kept (..._cached_total), the
prefill seconds, the time to first token (the histogram's sum), and VmRSS /
VmHWM of the server. Settings run interleaved (ring, full, ring, full, ...),
each chat on a fresh server.

usage: swa_kv_chat.py SPILL MODEL [--settings ring,full] [--repeats 2]
                      [--turns 4] [--reply 96] [--extra ARG ...]
Prints one JSON line per turn and a Markdown table of medians.
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
import time
import urllib.request

SYSTEM = ("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
          "Knowledge cutoff: 2024-06\nCurrent date: 2026-12-07\n\nReasoning: medium\n\n"
          "# Valid channels: analysis, commentary, final. Channel must be included for every "
          "message.<|end|><|start|>developer<|message|># Instructions\n\nAnswer briefly and "
          "cite the page you used.<|end|>")
USERS = [
    "How does an expert cache decide which expert to evict when a new one is read from disk?",
    "And if the same experts come back every few tokens, would a frequency count help more than "
    "recency? Give an example with four experts.",
    "Now suppose the router of the next layer can be guessed one layer early. What changes?",
    "Summarise the three answers in two sentences for a design note.",
    "One more: what should the note say about the cost of a wrong guess?",
]
FINALS = [
    "It evicts the least recently used slot unless a policy with frequency or next-use "
    "information is set; see the cache page.",
    "Yes: with experts A, B, C, D where A and B recur, a frequency count keeps them while "
    "recency lets a burst of C and D push them out.",
    "The read can start one layer early, so the wait for the disk overlaps the current layer's "
    "compute; a wrong guess costs a wasted read.",
    "Caches keep recurring experts; early guesses hide the read latency.",
    "A wrong guess costs one record of bandwidth and nothing else.",
]


def user_msg(u):
    return "<|start|>user<|message|>" + u + "<|end|><|start|>assistant"


def final_msg(f):
    return "<|channel|>final<|message|>" + f + "<|end|>"


def metrics(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=60) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"^([a-zA-Z_:]+)(\{[^}]*\})?\s+(\S+)$", line)
        if m and not m.group(2):
            out[m.group(1)] = float(m.group(3))
    return out


def complete(port, prompt, n):
    body = json.dumps({"model": "spill", "prompt": prompt, "max_tokens": n, "temperature": 0}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=3600) as r:
        res = json.loads(r.read().decode())
    return res, time.monotonic() - t0


def chat(spill, model, setting, turns, reply, extra):
    cmd = [spill, "serve", model, "--port", "0", "--model-id", "spill", "--swa-kv", setting] + extra
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    port = None
    for line in p.stderr:
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        p.wait()
        sys.exit("server did not start: " + " ".join(cmd))
    rows = []
    try:
        prompt = SYSTEM
        for t in range(turns):
            prompt += user_msg(USERS[t])
            a = metrics(port)
            res, wall = complete(port, prompt, reply)
            b = metrics(port)
            d = lambda k: b.get(k, 0) - a.get(k, 0)
            rows.append({
                "setting": setting, "turn": t + 1,
                "prompt_tokens": res["usage"]["prompt_tokens"],
                "cached": int(d("spill_prompt_tokens_cached_total")),
                "prefilled": int(d("spill_prompt_tokens_total")),
                "generated": int(d("spill_generated_tokens_total")),
                "prefill_s": round(d("spill_prefill_seconds_total"), 3),
                "ttft_s": round(d("spill_time_to_first_token_seconds_sum"), 3),
                "request_s": round(wall, 3),
                "rss_mib": round(b["spill_resident_set_bytes"] / 2**20, 1),
                "peak_rss_mib": round(b["spill_peak_resident_set_bytes"] / 2**20, 1),
            })
            print(json.dumps(rows[-1]), flush=True)
            # harmony: the next prompt keeps the reply's final message only
            prompt += final_msg(FINALS[t])
    finally:
        p.terminate()
        p.wait()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("spill")
    ap.add_argument("model")
    ap.add_argument("--settings", default="ring,full")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--reply", type=int, default=96)
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[])
    o = ap.parse_args()
    settings = o.settings.split(",")
    rows = []
    for _ in range(o.repeats):
        for s in settings:
            rows += chat(o.spill, o.model, s, o.turns, o.reply, o.extra)
    print("| swa_kv | turn | prompt tokens | prefilled | kept | prefill s | TTFT s | RSS MiB | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in settings:
        for t in range(1, o.turns + 1):
            r = [x for x in rows if x["setting"] == s and x["turn"] == t]
            med = lambda k: statistics.median(x[k] for x in r)
            print("| %s | %d | %d | %d | %d | %.2f | %.2f | %.1f | %.1f |" % (
                s, t, med("prompt_tokens"), med("prefilled"), med("cached"), med("prefill_s"),
                med("ttft_s"), med("rss_mib"), med("peak_rss_mib")))


if __name__ == "__main__":
    main()
