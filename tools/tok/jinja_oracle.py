#!/usr/bin/env python3
"""tools/tok/jinja_oracle.py: renders a chat template with Python jinja2
(Debian python3-jinja2) in the environment transformers' apply_chat_template
uses (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, tojson = json.dumps(ensure_ascii=False, ...), raise_exception,
strftime_now): the byte-for-byte oracle of engine/tok's Jinja interpreter.

  jinja_oracle.py TEMPLATE_FILE CONTEXT_JSON_FILE
prints the rendering on stdout (exact bytes, no newline added); a template
error prints "ERROR: <message>" on stderr and exits 3.
  jinja_oracle.py --batch DIR
renders every DIR/*.jinja x DIR/*.json pair (sorted) in one process and
prints one JSON line each: {"template", "context", "ok", "out" (base64)}.
"""
import base64
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def make_env():

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, template_path, context_path):
    with open(template_path, encoding="utf-8", newline="") as f:
        template = f.read()
    with open(context_path, encoding="utf-8") as f:
        context = json.load(f)
    return env.from_string(template).render(**context)


def main():
    env = make_env()
    if len(sys.argv) == 3 and sys.argv[1] == "--batch":
        d = sys.argv[2]
        names = sorted(os.listdir(d))
        for t in [n for n in names if n.endswith(".jinja")]:
            for c in [n for n in names if n.endswith(".json")]:
                try:
                    out, ok = render(env, os.path.join(d, t), os.path.join(d, c)), True
                except Exception as e:  # noqa: BLE001 - a template failure is an answer
                    out, ok = f"{type(e).__name__}: {e}", False
                print(json.dumps({"template": t, "context": c, "ok": ok,
                                  "out": base64.b64encode(out.encode("utf-8")).decode()}))
        return
    if len(sys.argv) != 3:
        print("usage: jinja_oracle.py TEMPLATE_FILE CONTEXT_JSON_FILE | --batch DIR",
              file=sys.stderr)
        sys.exit(2)
    try:
        out = render(env, sys.argv[1], sys.argv[2])
    except Exception as e:  # noqa: BLE001 - any template failure is the oracle's answer
        print(f"ERROR: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(3)
    sys.stdout.buffer.write(out.encode("utf-8"))


if __name__ == "__main__":
    main()
