#!/bin/sh
# spill exp --slurm: experiment cluster-policy-ab, 2 unit(s); array task N runs unit N
# (every arm and repeat of a cell, its budgets upward) into
# /work/wt/slurm/results/cluster-policy-ab/20261201T231242Z-32455705ae/slurm/rows/uNNN.jsonl
#SBATCH --job-name=spill-cluster-policy-ab
#SBATCH --array=0-1
#SBATCH --output=/work/wt/slurm/results/cluster-policy-ab/20261201T231242Z-32455705ae/slurm/logs/u%a-j%A.out
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --chdir=/work/wt/slurm
#SBATCH --time=30
#SBATCH --cpus-per-task=1
exec /root/.cache/bazel/_bazel_root/3ce30fecc99b260063442292641b2b51/execroot/spill/bazel-out/k8-opt/bin/cli/spill exp --slurm-task /work/wt/slurm/results/cluster-policy-ab/20261201T231242Z-32455705ae --unit "$SLURM_ARRAY_TASK_ID"
