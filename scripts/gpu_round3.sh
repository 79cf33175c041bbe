#!/usr/bin/env bash
# Issue 34 (GPU speed, round 3) in one device call of at most ~8 minutes on an H200: the rows of
# the issue's table for THIS checkout and for the base commit (0367bda), timed in the same run.
#   1. the Triton gossip's tests (tests/test_ordered_mix_triton.py) and the captured iteration's
#      CUDA tests (tests/test_gan_cuda_graph.py -k cuda: replay against eager in float32),
#   2. scripts/bench_mix.py: one mix of both players per kernel (Triton ordered, its torch-ops
#      form = the base's CUDA path, matmul): kernels per mix, census bytes and time against the
#      floor, the Triton result's float32 bits against the CPU kernel,
#   3. scripts/bench_gan.py --skip-loop at M = 5 and 15, base then this, TF32 (with the breakdown:
#      mixing, optimizer ops / bytes per iteration, cuDNN layout conversions per iteration) and
#      bf16 autocast (headline only); this checkout with --autotune-layers,
#   4. training runs on generated images (dataset=fake, Dadam3, batch 64 per node), base then
#      this, ms/it from metrics.jsonl over iterations 40..ITERATIONS, cuda.graphs=true: dcgan32
#      M = 5 and dcgan64 64x64 M = 15; with EXTRA=1 also + bf16, eager M = 15 and
#      cuda.autotune_layers=true (about 4 more minutes: a second device call).
# Output is written as it comes (tee), so a run stopped by a time limit keeps what it measured.
# Usage: bash scripts/gpu_round3.sh OUT_DIR        (writes OUT_DIR/round3.txt)
# The base checkout: BASE_DIR (a checkout of BASE), else a `git worktree` of BASE (default 0367bda)
# made here (needs the repository's .git; without one: `git archive 0367bda | tar -x -C base` in the
# checkout beforehand, then BASE_DIR=base). PYTHON (default python), ITERATIONS (default 160),
# NODES (default "5 15"), BENCH_ARGS (appended to every bench_gan call), TRAIN_ARGS (to every
# training run), TRAIN (default 1; 0 skips step 4) and DEVICE (cuda) let a CPU smoke run shrink it.
set -euo pipefail
cd "$(dirname "$0")/.."
HERE=$(pwd)
OUT_DIR=${1:?usage: bash scripts/gpu_round3.sh OUT_DIR}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
PY=${PYTHON:-python}
DEVICE=${DEVICE:-cuda}
BASE=${BASE:-0367bda}
ITERATIONS=${ITERATIONS:-160}
read -r -a NODES <<<"${NODES:-5 15}"
read -r -a BENCH_EXTRA <<<"${BENCH_ARGS:---iters 20 --warmup 4 --max-seconds 15}"
read -r -a TRAIN_EXTRA <<<"${TRAIN_ARGS:-}"
export PYTHONUNBUFFERED=1
WORK=$(mktemp -d)
cleanup() {
  if [ -z "${BASE_DIR_GIVEN:-}" ] && [ -d "$WORK/base" ]; then git worktree remove --force "$WORK/base" || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
if [ -n "${BASE_DIR:-}" ]; then
  BASE_DIR_GIVEN=1
  BASE_DIR=$(cd "$BASE_DIR" && pwd)
else
  git worktree add --detach "$WORK/base" "$BASE" >/dev/null 2>&1 || {
    echo "gpu_round3.sh: cannot make a git worktree of $BASE here; pass BASE_DIR=<a checkout of $BASE>" >&2
    exit 2
  }
  BASE_DIR=$WORK/base
fi

train_ms() {  # dir: ms/it over the logged iterations >= 40
  "$PY" -c "
import json, sys
recs = list(map(json.loads, open(sys.argv[1])))
run = [r for r in recs if r.get('status') == 'running' and r['iteration'] >= 40] or \
      [r for r in recs if r.get('status') == 'running']
rate = (run[-1]['iteration'] - run[0]['iteration']) / (run[-1]['time'] - run[0]['time'])
print(f'{1e3 / rate:.1f} ms/it over iterations {run[0][\"iteration\"]}-{run[-1][\"iteration\"]}, '
      f'loss_d {run[-1][\"loss_d\"]:.4g}, status {recs[-1].get(\"status\")}')
" "$1/metrics.jsonl"
}

train() {  # label, code dir, overrides...
  local label=$1 code=$2; shift 2
  local dir="$WORK/run_$RANDOM$RANDOM"
  echo "== training [$label] $*"
  (cd "$code" && "$PY" -m dadam3.train dataset=fake optimizer=dadam3 device="$DEVICE" loop.iterations="$ITERATIONS" \
    loop.batch_size=64 loop.log_every=20 loop.sample_every="$ITERATIONS" loop.checkpoint_every="$ITERATIONS" \
    metrics.every=0 loop.progress=false "$@" "${TRAIN_EXTRA[@]}" hydra.run.dir="$dir" 2>&1 \
    | grep -E "cuda\.|autotune|Error|error" || true)
  grep -hE "autotune|cuda.graphs" "$dir"/*.log 2>/dev/null | head -n 20 || true
  train_ms "$dir" || echo "(no metrics: the run failed)"
}

bench() {  # label, code dir, args...
  local label=$1 code=$2; shift 2
  echo "== bench_gan [$label] $*"
  (cd "$code" && "$PY" scripts/bench_gan.py --device "$DEVICE" --nodes "${NODES[@]}" --skip-loop "$@" "${BENCH_EXTRA[@]}" 2>&1 \
    | grep -E "census|^\| |^M=|Error|error" | grep -v "breakdown:" || true)
}

{
  echo "== machine; this checkout $(git rev-parse --short HEAD 2>/dev/null || echo '?') against base $BASE ($BASE_DIR)"
  "$PY" -c "import torch, sys; print('python', sys.version.split()[0], '| torch', torch.__version__, '| CUDA', \
torch.version.cuda, '| cuDNN', torch.backends.cudnn.version(), '| device', \
torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')"
  "$PY" -c "import triton; print('triton', triton.__version__)" || echo "triton: not importable"
  date -u

  echo "== tests"
  "$PY" -m pytest -q -p no:cacheprovider -p no:randomly -n 0 -rs tests/test_ordered_mix_triton.py 2>&1 | tail -n 3
  "$PY" -m pytest -q -p no:cacheprovider -p no:randomly -n 0 -rs -k "replay_equals_eager" tests/test_gan_cuda_graph.py 2>&1 | tail -n 3

  echo "== bench_mix (this checkout; ordered-torch-ops is the base's CUDA path)"
  "$PY" scripts/bench_mix.py --device "$DEVICE" --nodes "${NODES[@]}"

  bench "base $BASE, TF32" "$BASE_DIR"
  bench "this, TF32" "$HERE"
  bench "base $BASE, bf16" "$BASE_DIR" --autocast bf16 --no-breakdown
  bench "this, bf16" "$HERE" --autocast bf16 --no-breakdown
  bench "this, TF32, --autotune-layers" "$HERE" --autotune-layers --no-breakdown

  if [ "${TRAIN:-1}" = 0 ]; then date -u; exit 0; fi
  M5="model=dcgan32 nodes=5"
  M15="model=dcgan64 dataset.image_size=64 nodes=15"
  # shellcheck disable=SC2086
  {
    train "base, graphs" "$BASE_DIR" $M5 cuda.graphs=true
    train "this, graphs" "$HERE" $M5 cuda.graphs=true
    train "base, graphs" "$BASE_DIR" $M15 cuda.graphs=true
    train "this, graphs" "$HERE" $M15 cuda.graphs=true
    date -u
    if [ "${EXTRA:-0}" = 1 ]; then      # the table's other training rows (about 4 more minutes)
      train "base, graphs + bf16" "$BASE_DIR" $M5 cuda.graphs=true loop.autocast=bf16
      train "this, graphs + bf16" "$HERE" $M5 cuda.graphs=true loop.autocast=bf16
      train "this, graphs + autotune_layers" "$HERE" $M5 cuda.graphs=true cuda.autotune_layers=true
      train "base, eager" "$BASE_DIR" $M15
      train "this, eager" "$HERE" $M15
      train "this, graphs + autotune_layers" "$HERE" $M15 cuda.graphs=true cuda.autotune_layers=true
    fi
  }
  date -u
} 2>&1 | tee "$OUT_DIR/round3.txt"
