#!/usr/bin/env bash
# Evaluates flake.nix's outputs offline (nix-instantiate --eval, no store, no
# network) against a stand-in for the pinned nixpkgs whose package set holds
# only the attribute names in nixos-23.11-attrs.txt: every name the dev shell
# takes must be in that list (a missing one fails the evaluation and names
# it), and the flake must pin the branch the list was checked against. This
# does not fetch, build or evaluate nixpkgs itself (README "Nix").
# Args: FLAKE_NIX ATTRS_TXT
set -euo pipefail
flake="$(realpath "$1")"; attrs="$(realpath "$2")"
command -v nix-instantiate >/dev/null || { echo "nix-instantiate not installed (./lab installs nix-bin)" >&2; exit 1; }
out=$(nix-instantiate --readonly-mode --store dummy:// --eval --strict --json -E "
let
  lines = builtins.filter (l: builtins.isString l && l != \"\" && builtins.substring 0 1 l != \"#\")
            (builtins.split \"\n\" (builtins.readFile $attrs));
  pin = builtins.head lines;
  names = builtins.tail lines;
  isPy = n: builtins.substring 0 15 n == \"python3Packages\";
  pyNames = map (n: builtins.substring 16 100 n) (builtins.filter isPy names);
  set = ns: builtins.listToAttrs (map (n: { name = n; value = n; }) ns);
  pySet = set pyNames;
  pkgs = set (builtins.filter (n: !(isPy n)) names) // {
    python3 = { withPackages = f: \"python3+\" + builtins.concatStringsSep \"+\" (f pySet); };
    mkShell = args: args.packages;
  };
  nixpkgs = {
    lib.genAttrs = ns: f: builtins.listToAttrs (map (n: { name = n; value = f n; }) ns);
    legacyPackages.x86_64-linux = pkgs;
  };
  flake = import $flake;
  shell = (flake.outputs { self = {}; inherit nixpkgs; }).devShells.x86_64-linux.default;
in
  assert flake.inputs.nixpkgs.url == pin || throw \"flake pins \${flake.inputs.nixpkgs.url}, the attribute list is for \${pin}\";
  shell
")
echo "flake.nix dev shell evaluates against the pinned attribute names: $out"
