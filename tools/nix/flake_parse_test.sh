#!/usr/bin/env bash
# Checks that flake.nix parses with Debian's nix-instantiate (nix-bin). The
# flake is not built here (no network); this only guards its syntax.
set -euo pipefail
flake="$1"
if ! command -v nix-instantiate >/dev/null; then
  echo "nix-instantiate not installed (./lab installs nix-bin)" >&2
  exit 1
fi
nix-instantiate --readonly-mode --store dummy:// --parse "$flake" >/dev/null
echo "flake.nix parses"
