#!/usr/bin/env bash
# Prove the CUDA path on a fresh GPU machine with no internet, in one short run.
#
# Runs the GPU-marked tests, then the study's CUDA cells through the `mnistbench` CLI (no
# snakemake needed): fp32, tf32, bf16 and fp16 x both loaders x batch 128, 512 and 4096, two
# epochs each; bf16 with torch.compile (reduce-overhead: CUDA graphs) at batch 128; and the
# blog's convergence run (10 epochs, batch 128, fp32) for both loaders. Cells are written in
# the workflow's layout, runs/{env}/{experiment}/{cell}/, then packed into $OUT/runs.tar.gz
# (the device tool returns only a few files, two folders deep).
#
# Environment (all optional):
#   OUT          where results go (default: results/gpu_check)
#   PYTHON       interpreter with torch (default: python3)
#   DEVICE       cuda (default) or cpu, to test this script's logic on a CPU machine
#   MIRROR       folder with the four MNIST files, gzipped or not (default: .mnist-gz)
#   DATA         verified MNIST folder (default: $OUT/../mnist, fetched from MIRROR)
#   CELL_ARGS    extra flags for every cell, e.g. "--train-limit 512 --max-steps 4" for a dry run
#   CONV_EPOCHS  epochs of the convergence runs (default 10)
#   BATCHES      batch sizes of the sweep (default "128 512 4096")
#   CELL_TIMEOUT seconds before a cell is stopped (default 240)
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-results/gpu_check}
PYTHON=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
MIRROR=${MIRROR:-.mnist-gz}
DATA=${DATA:-$OUT/../gpu_check_mnist}
CELL_ARGS=${CELL_ARGS:-}
CONV_EPOCHS=${CONV_EPOCHS:-10}
BATCHES=${BATCHES:-128 512 4096}
CELL_TIMEOUT=${CELL_TIMEOUT:-240}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log="$OUT/gpu_check.log"
: >"$log"
say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$log"; }

mb() { "$PYTHON" -m mnistbench.cli "$@"; }
envname=${MNISTBENCH_ENV:-$("$PYTHON" -c 'from mnistbench.sysinfo import default_env_name as d; print(d())')}
export MNISTBENCH_ENV=$envname
say "env $envname, device $DEVICE, python $("$PYTHON" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)')"
command -v nvidia-smi >/dev/null && nvidia-smi -L | tee -a "$log"
mb env >"$OUT/env.json"

say "fetch MNIST from $MIRROR"
mb fetch --dest "$DATA" --mirror "$MIRROR" --no-default-mirrors --quiet || { say "fetch failed"; exit 1; }

if [ "$DEVICE" = cuda ]; then
  say "GPU-marked tests"
  "$PYTHON" -m pytest -q -m gpu -p no:cacheprovider tests >"$OUT/gpu_tests.log" 2>&1
  say "gpu tests exit $? ($(tail -n 1 "$OUT/gpu_tests.log"))"
fi

supported() { "$PYTHON" -c "import sys; from mnistbench.devices import is_supported as s; sys.exit(not s('$DEVICE', '$1'))"; }

cell() {  # experiment cell-id flags...
  local experiment=$1 id=$2
  shift 2
  local dir="$work/runs/$envname/$experiment/$id"
  local start=$SECONDS
  # shellcheck disable=SC2086
  timeout --kill-after=10 "$CELL_TIMEOUT" "$PYTHON" -m mnistbench.cli train --device "$DEVICE" \
    --data "$DATA" --out "$dir" --env "$envname" --experiment "$experiment" --cell "$id" \
    --quiet "$@" $CELL_ARGS 2>>"$log"
  local code=$?
  local status
  status=$("$PYTHON" -c "import json,sys; s=json.load(open(sys.argv[1])); r=s['results']; print(s['status'], 'epoch_s=%s acc=%s' % (r['epoch_s_median'], r['final_test_acc']))" "$dir/summary.json" 2>/dev/null || echo "no summary (exit $code)")
  say "$experiment/$id: exit $code, $status, $((SECONDS - start)) s"
}

for precision in fp32 tf32 bf16 fp16; do
  supported "$precision" || { say "skip $precision: not supported on $DEVICE"; continue; }
  for loader in resident dataloader; do
    for batch in $BATCHES; do
      cell sweep "$DEVICE-$precision-$loader-b$batch-r0" --precision "$precision" \
        --loader "$loader" --batch-size "$batch" --epochs 2
    done
  done
done
if [ "$DEVICE" = cuda ]; then
  cell sweep "$DEVICE-bf16-resident-b128-compiled-r0" --precision bf16 --loader resident \
    --batch-size 128 --epochs 2 --compile reduce-overhead
fi
for loader in resident dataloader; do
  cell convergence "$DEVICE-fp32-$loader-b128-r0" --precision fp32 --loader "$loader" \
    --batch-size 128 --epochs "$CONV_EPOCHS"
done

tar -C "$work" -czf "$OUT/runs.tar.gz" runs
say "packed $(find "$work/runs" -name summary.json | wc -l) cells into $OUT/runs.tar.gz"
