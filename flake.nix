{
  # Dev shell for users who live in Nix. It names the same dependencies that
  # ./lab installs from Debian on Debian 12 (see README: what was tried).
  description = "spill: MoE inference streaming experts from SSD, and its research harness";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-24.05";

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
            (python3.withPackages (ps: [ ps.numpy ]))
            gnuplot
            fio
          ];
        };
      });
    };
}
