#!/bin/sh
# spill exp --slurm: merges the task rows of /work/wt/slurm/results/cluster-policy-ab/20261201T231242Z-32455705ae and writes the report;
# submitted with --dependency=afterok:<array job>
#SBATCH --job-name=spill-cluster-policy-ab-merge
#SBATCH --kill-on-invalid-dep=yes
#SBATCH --output=/work/wt/slurm/results/cluster-policy-ab/20261201T231242Z-32455705ae/slurm/logs/merge-j%j.out
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --chdir=/work/wt/slurm
#SBATCH --time=30
exec /root/.cache/bazel/_bazel_root/3ce30fecc99b260063442292641b2b51/execroot/spill/bazel-out/k8-opt/bin/cli/spill exp --merge /work/wt/slurm/results/cluster-policy-ab/20261201T231242Z-32455705ae --refuted /work/wt/slurm/refuted
