{
  # Dev shell for users who live in Nix. It names the same dependencies that
  # ./lab installs from Debian on Debian 12 (see README: what was tried).
  description = "spill: MoE inference streaming experts from SSD, and its research harness";

  # nixos-23.11: the last release branch with bazel_4 (nixpkgs dropped it in
  # PR 283142, merged 2024-01-23, before 24.05), the Bazel generation Debian 12
  # carries (bazel-bootstrap 4.2.3) and the WORKSPACE build is written for.
  # No flake.lock: locking needs the fetched tree (network); see README "Nix".
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-23.11";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" ];
      forAll = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
    in {
      devShells = forAll (pkgs: {
        default = pkgs.mkShell {
          packages = with pkgs; [
            bazel_4
            gcc
            gtest
            gbenchmark
            cjson
            liburing
            pcre2
            utf8proc
            libmicrohttpd
            nodejs
            (python3.withPackages (ps: [ ps.numpy ps.jinja2 ]))
            gnuplot
            fio
          ];
        };
      });
    };
}
