#!/usr/bin/env bash
# Run a posenc section as an array of shards on a shared directory, then assemble its report.
#
#   bash docs/slurm_array.sh submit SECTION OUT PROFILE N [posenc options...]
#       submits an N-task SLURM array (one `--shard i/N` each) and a final job that
#       runs after it and writes OUT/report.md (sbatch must be on the PATH).
#   bash docs/slurm_array.sh task SECTION OUT PROFILE [posenc options...]
#       what each array task runs (reads SLURM_ARRAY_TASK_ID / _COUNT / _MIN).
#   bash docs/slurm_array.sh local SECTION OUT PROFILE N [posenc options...]
#       the same array without SLURM: N shard processes on this machine, then the final run.
#
# OUT must be on a file system every node sees. Shards are balanced by the jobs' costs;
# jobs are claimed in OUT before they run, so a re-submitted or overlapping task skips
# what is finished or running elsewhere, and a killed one is resumed by the next run.
# POSENC overrides the command (default: posenc), e.g. POSENC="python -m posenc.cli".
#SBATCH --job-name=posenc
#SBATCH --cpus-per-task=1
#SBATCH --output=posenc-%A_%a.log
set -euo pipefail
POSENC=${POSENC:-posenc}

mode=${1:?usage: slurm_array.sh submit|task|local SECTION OUT PROFILE [N] [options]}
section=${2:?section}
out=${3:?run directory}
profile=${4:-quick}
shift $(( $# < 4 ? $# : 4 ))

case "$mode" in
  submit)
    n=${1:?number of array tasks}; shift
    array=$(sbatch --parsable --array="1-$n" "$0" task "$section" "$out" "$profile" "$@")
    sbatch --dependency="afterany:$array" --cpus-per-task=1 --job-name=posenc-report \
      --wrap="$POSENC reproduce $section --profile $profile --out $out $*"
    echo "array $array: $n shards of $section into $out; the report job runs after it"
    ;;
  task)
    n=${SLURM_ARRAY_TASK_COUNT:?not inside a SLURM array}
    i=$(( SLURM_ARRAY_TASK_ID - ${SLURM_ARRAY_TASK_MIN:-1} + 1 ))
    exec $POSENC reproduce "$section" --profile "$profile" --out "$out" --shard "$i/$n" \
      --threads "${SLURM_CPUS_PER_TASK:-1}" "$@"
    ;;
  local)
    n=${1:?number of shards}; shift
    pids=()
    for i in $(seq 1 "$n"); do
      $POSENC reproduce "$section" --profile "$profile" --out "$out" --shard "$i/$n" --threads 1 "$@" \
        > "$out.shard$i.log" 2>&1 &
      pids+=($!)
    done
    status=0
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
    # the final run computes whatever a failed shard left, then writes the report
    $POSENC reproduce "$section" --profile "$profile" --out "$out" "$@"
    exit $status
    ;;
  *)
    echo "unknown mode $mode (submit | task | local)" >&2
    exit 2
    ;;
esac
