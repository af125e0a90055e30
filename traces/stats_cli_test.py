#!/usr/bin/python3
# traces/stats_cli_test.py: `spill trace stats` on every committed trace of
# traces/ (issue 20): it must print the header's provenance and every caveat
# of the file, and each statistic docs/TRACE.md lists (next-token reuse per
# layer, reuse distance, cross-layer co-activation with its baselines,
# popularity skew, Belady at 3/6/12% of the pool); its --json must agree
# with the file's shape. The six gpt-oss-20b sequences concatenated read as
# one trace of six sequences. docs/CACHE.md's "What the traces look like"
# table must hold the figures stats prints for each family.
# Usage: stats_cli_test.py SPILL CACHE_MD TRACE.jsonl...
import json
import os
import re
import subprocess
import sys
import tempfile

FAILS = []


def fail(msg):
    FAILS.append(msg)
    print("FAIL " + msg)


def stats(spill, path, *flags):
    p = subprocess.run([spill, "trace", "stats", *flags, path], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"{path}: spill trace stats {' '.join(flags)} exited {p.returncode}: {p.stderr[:200]}")
        return None
    return p.stdout


def header_of(path):
    with open(path, encoding="utf-8") as f:
        first = json.loads(f.readline())
    return first.get("header")


LABELS = ["next-token reuse", "coverage", "popularity skew", "reuse distance (tokens)",
          "co-activation", "baselines: most popular", "belady (MIN) hit rate"]


def check_text(path, text, hdr, layers):
    for label in LABELS:
        if not re.search(r"^\s*" + re.escape(label), text, re.M):
            fail(f"{path}: no '{label}' line")
    if not re.search(r"3% of the pool .*6% of the pool .*12% of the pool", text):
        fail(f"{path}: Belady not at 3/6/12% of the pool")
    rows = re.findall(r"^\s+(\d+)\s+\d+\s+[0-9.]+\s+[0-9.]+%\s+[0-9.]+%\s+(?:-|[0-9.]+%)$", text, re.M)
    if [int(r) for r in rows] != list(range(layers)):
        fail(f"{path}: per-layer table has layers {rows[:4]}..., want 0..{layers - 1}")
    if hdr is None:
        return
    for key, label in (("model", "model"), ("source", "source"), ("converted_from", "converted from")):
        if key in hdr and not re.search(rf"^{label}\s+{re.escape(hdr[key])}$", text, re.M):
            fail(f"{path}: header {key} not printed as '{label}'")
    for c in hdr.get("caveats", []):
        if not re.search(rf"^caveat\s+{re.escape(c)}$", text, re.M):
            fail(f"{path}: caveat not printed: {c}")


def check_json(path, js, hdr):
    d = json.loads(js)
    pool = d["layers"] * d["experts"]
    if pool != d["pool"]:
        fail(f"{path}: pool {d['pool']} != layers x experts {pool}")
    if hdr is not None:
        for k in ("layers", "experts", "top_k", "tokens"):
            if k in hdr and hdr[k] != d[k]:
                fail(f"{path}: header {k} {hdr[k]} but stats read {d[k]}")
        if d["header"].get("caveats") != hdr.get("caveats"):
            fail(f"{path}: --json caveats differ from the file's header")
    if len(d["per_layer"]) != d["layers"]:
        fail(f"{path}: per_layer has {len(d['per_layer'])} entries, want {d['layers']}")
    total = sum(d["reuse_distance"].values())
    if abs(total - 1.0) > 1e-4:
        fail(f"{path}: reuse distance fractions sum to {total}")
    if len(d["belady"]) != 3:
        fail(f"{path}: {len(d['belady'])} Belady points, want 3 (3/6/12%)")
    return d


def doc_rows(cache_md):
    """The 'What the traces look like' table of docs/CACHE.md: label -> cells."""
    rows = {}
    with open(cache_md, encoding="utf-8") as f:
        lines = f.read().split("\n")
    start = next((i for i, l in enumerate(lines) if l.startswith("| trace | tokens | next-token reuse")), None)
    if start is None:
        fail(f"{cache_md}: no 'What the traces look like' table")
        return rows
    for l in lines[start + 2:]:
        if not l.startswith("|"):
            break
        cells = [c.strip() for c in l.strip("|").split("|")]
        rows[cells[0].split(" (")[0]] = cells[1:]
    return rows


def doc_cells(d):
    """The table's cells as docs/CACHE.md rounds them, from stats --json."""
    rd = d["reuse_distance"]
    co = d["coactivation"]
    return [str(d["tokens"]), f"{100 * d['reuse_next']:.1f}%",
            f"{d['gini_mean']:.3f} / {100 * d['top10_share_mean']:.1f}%",
            f"{100 * (rd['2'] + rd['3-4'] + rd['5-8']):.1f}%",
            f"{100 * co['precision']:.1f}% ({100 * co['prev_token_precision']:.1f}%)",
            " / ".join(f"{100 * b['hit_rate']:.1f}" for b in d["belady"])]


# docs/CACHE.md row label -> the trace file(s) it describes (several: concatenated)
DOC_FAMILIES = {
    "OLMoE-1B-7B": ["olmoe-1b-7b-299.jsonl"],
    "Gemma-4-26B-A4B": ["bigmoeonedge/gemma-4-26b-a4b.jsonl"],
    "gpt-oss-120b": ["bigmoeonedge/gpt-oss-120b.jsonl"],
    "gpt-oss-20b": ["gpt-oss-20b-fingerprinting/"],
    "Mixtral-8x7B": ["mixtral-offloading/mixtral-8x7b.jsonl"],
}


def family_trace(paths, parts, tmp):
    """One file for a family: the trace itself, or its sequences concatenated."""
    mine = sorted(p for p in paths for part in parts if part in p.replace(os.sep, "/"))
    if len(mine) == 1:
        return mine[0], 1
    cat = os.path.join(tmp, "family.jsonl")
    with open(cat, "w", encoding="utf-8") as out:
        for p in mine:
            with open(p, encoding="utf-8") as f:
                out.write(f.read())
    return cat, len(mine)


def check_family(spill, label, cells, paths, tmp):
    path, n = family_trace(paths, DOC_FAMILIES[label], tmp)
    js = stats(spill, path, "--json")
    if js is None:
        return
    d = json.loads(js)
    if n > 1 and d["header"].get("sequences") != n:
        fail(f"{label}: {n} files concatenated read as {d['header'].get('sequences')} sequences")
    want = doc_cells(d)
    if cells != want:
        fail(f"docs/CACHE.md row {label}: {cells}, stats prints {want}")
    else:
        print(f"ok   docs/CACHE.md row {label} = stats of {n} file(s)")


def main():
    if len(sys.argv) < 4:
        print("usage: stats_cli_test.py SPILL CACHE_MD TRACE.jsonl...", file=sys.stderr)
        return 2
    spill, cache_md, paths = sys.argv[1], sys.argv[2], sys.argv[3:]
    for path in paths:
        hdr = header_of(path)
        js = stats(spill, path, "--json")
        text = stats(spill, path)
        if js is None or text is None:
            continue
        d = check_json(path, js, hdr)
        check_text(path, text, hdr, d["layers"])
        print(f"ok   {path}: {d['tokens']} tokens, {len(hdr.get('caveats', [])) if hdr else 0} caveats")
    rows = doc_rows(cache_md)
    if sorted(rows) != sorted(DOC_FAMILIES):
        fail(f"docs/CACHE.md families {sorted(rows)}, want {sorted(DOC_FAMILIES)}")
    with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as tmp:
        for label in DOC_FAMILIES:
            if label in rows:
                check_family(spill, label, rows[label], paths, tmp)
    print(f"{len(FAILS)} failures")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
