#!/bin/bash
# Run CONFIG as an N-task SLURM job array (array.sbatch) writing OUT.shard<I>ofN.h5, and a merge job
# (merge.sbatch) that starts once every task succeeded and joins the shards into OUT. Jobs run in the
# current directory with the current environment (adgrad on PATH). Prints the two job ids.
# Usage: configs/slurm/submit.sh CONFIG N OUT [adgrad run options]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
config=${1:?usage: submit.sh CONFIG N OUT [adgrad run options]}
n=${2:?usage: submit.sh CONFIG N OUT [adgrad run options]}
out=${3:?usage: submit.sh CONFIG N OUT [adgrad run options]}
shift 3
array=$(sbatch --parsable --array="0-$((n - 1))" "$here/array.sbatch" "$config" "$out" "$@")
array=${array%%;*}
# afterok: only if every task exits 0; a failed task cancels the merge instead of leaving it pending
merge=$(sbatch --parsable --dependency="afterok:$array" --kill-on-invalid-dep=yes "$here/merge.sbatch" "$out" "$n")
echo "$array ${merge%%;*}"
