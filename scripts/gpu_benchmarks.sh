#!/usr/bin/env bash
# Everything that needs a GPU, in one go (for docs/benchmarks.md):
#   1. the CUDA tests (skipped on machines without CUDA),
#   2. scripts/bench_gan.py --device cuda (paper's 32x32 nets at full width, batch 64 per
#      node, M = 1, 5, 15: batched vs loop, mixing share, FLOP rate against the TF32 peak),
#   3. two short real-size training runs on generated images (dataset=fake): the Fig. 3
#      setting (dcgan32, M = 5) and the Fig. 4b setting (dcgan64 at 64x64, M = 15), Dadam3,
#      batch 64 per node, with it/s from metrics.jsonl,
#   4. scripts/bench_distributed.py with NCCL, one GPU per rank, R in {1, 2, 4} up to the
#      GPUs present: one mix (and the two-hop round, --fused) and whole training iterations
#      of the full-width dcgan32 on M = 4 nodes.
# Usage: bash scripts/gpu_benchmarks.sh OUT_DIR
# Writes OUT_DIR/{tests.txt,bench_gan.txt,train_m5.jsonl,train_m15.jsonl,bench_distributed.txt,summary.txt}.
# DEVICE (default cuda), ITERATIONS (default 300), BENCH_ARGS and TRAIN_ARGS (appended to
# every bench / training command), DIST_RANKS (default: 1 2 4 up to the GPUs), DIST_ARGS
# and DIST_TRAIN_ARGS (appended to the distributed mix / --train overrides) let a CPU
# smoke run use tiny sizes (with DEVICE=cpu the distributed part uses gloo); TEST_PATHS
# (default tests) are the paths step 1 runs pytest -k cuda on.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:?usage: bash scripts/gpu_benchmarks.sh OUT_DIR}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
PY=${PYTHON:-python}
DEVICE=${DEVICE:-cuda}
ITERATIONS=${ITERATIONS:-300}
read -r -a BENCH_EXTRA <<<"${BENCH_ARGS:-}"
read -r -a TRAIN_EXTRA <<<"${TRAIN_ARGS:-}"
read -r -a DIST_EXTRA <<<"${DIST_ARGS:-}"
read -r -a DIST_TRAIN_EXTRA <<<"${DIST_TRAIN_ARGS:-}"
read -r -a TESTS <<<"${TEST_PATHS:-tests}"
export PYTHONUNBUFFERED=1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

{
  echo "== machine"
  "$PY" -c "import torch, sys; print('python', sys.version.split()[0], '| torch', torch.__version__, \
'| CUDA', torch.version.cuda, '| device', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
    --format=csv || true
} | tee "$OUT_DIR/summary.txt"

echo "== CUDA tests" | tee -a "$OUT_DIR/summary.txt"
"$PY" -m pytest -q -p no:cacheprovider -rs -k "cuda" "${TESTS[@]}" 2>&1 | tee "$OUT_DIR/tests.txt" | tail -n 3 \
  | tee -a "$OUT_DIR/summary.txt"

echo "== bench_gan" | tee -a "$OUT_DIR/summary.txt"
"$PY" scripts/bench_gan.py --device "$DEVICE" "${BENCH_EXTRA[@]}" 2>&1 | tee "$OUT_DIR/bench_gan.txt"
sed -n '/^| M |/,$p' "$OUT_DIR/bench_gan.txt" >>"$OUT_DIR/summary.txt"

train() {  # name, then overrides
  local name=$1; shift
  echo "== training run $name: $*" | tee -a "$OUT_DIR/summary.txt"
  "$PY" -m dadam3.train dataset=fake optimizer=dadam3 device="$DEVICE" loop.iterations="$ITERATIONS" loop.batch_size=64 \
    loop.log_every=25 loop.sample_every="$ITERATIONS" loop.checkpoint_every="$ITERATIONS" metrics.every=0 loop.progress=false \
    "$@" "${TRAIN_EXTRA[@]}" hydra.run.dir="$WORK/$name" 2>&1 | tail -n 5
  cp "$WORK/$name/metrics.jsonl" "$OUT_DIR/$name.jsonl"
  "$PY" - "$OUT_DIR/$name.jsonl" <<'EOF' | tee -a "$OUT_DIR/summary.txt"
import json, sys
recs = [json.loads(line) for line in open(sys.argv[1])]
run = [r for r in recs if r.get("status") == "running"]
first, last = run[0], run[-1]
rate = (last["iteration"] - first["iteration"]) / (last["time"] - first["time"])
print(f"iterations {last['iteration']}, {rate:.2f} it/s after iteration {first['iteration']} "
      f"({1e3 / rate:.1f} ms/it), loss_d {last['loss_d']:.4g}, loss_g {last['loss_g']:.4g}, "
      f"consensus distance {last['consensus_distance']:.3g}, status {recs[-1]['status']}")
EOF
}
train train_m5 model=dcgan32 nodes=5
train train_m15 model=dcgan64 dataset.image_size=64 nodes=15

echo "== bench_distributed" | tee -a "$OUT_DIR/summary.txt"
if [ "$DEVICE" = cuda ]; then
  BACKEND=nccl
  GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count())")
  DEFAULT_RANKS=""
  for r in 1 2 4; do
    if [ "$r" -le "$GPUS" ]; then DEFAULT_RANKS="$DEFAULT_RANKS $r"; fi
  done
else
  BACKEND=gloo DEFAULT_RANKS="1 2 4"
fi
read -r -a RANKS <<<"${DIST_RANKS:-$DEFAULT_RANKS}"
{
  "$PY" scripts/bench_distributed.py --backend "$BACKEND" --ranks "${RANKS[@]}" --fused "${DIST_EXTRA[@]}"
  "$PY" scripts/bench_distributed.py --backend "$BACKEND" --ranks "${RANKS[@]}" --train --nodes 4 --iters 20 \
    --overrides dataset=fake model=dcgan32 loop.n_critic=1 loop.batch_size=64 metrics.every=0 loop.sample_every=100000 \
    loop.checkpoint_every=0 "${DIST_TRAIN_EXTRA[@]}"
} 2>&1 | tee "$OUT_DIR/bench_distributed.txt"
grep -E "^(machine|LocalMixer|simulator|R=|    )" "$OUT_DIR/bench_distributed.txt" >>"$OUT_DIR/summary.txt"

# 5. Issue 25, round 2 (ROUND2=1; the default on CUDA): each change before -> after in one call,
#    into OUT_DIR/round2.txt: the critic's first-order convolution backward against torch's own
#    (--stock-conv-backward) in TF32 and bf16; the gossip stencil against the matmul; the layer
#    benchmark (and cudnn.benchmark_limit=0); training runs with cuda.graphs=true against eager.
#    ROUND2_BENCH_ARGS / ROUND2_LAYER_ARGS / ROUND2_TRAIN_ARGS shrink it for a CPU smoke run.
if [ "${ROUND2:-$([ "$DEVICE" = cuda ] && echo 1 || echo 0)}" = 1 ]; then
  read -r -a R2_BENCH <<<"${ROUND2_BENCH_ARGS:---nodes 5 15 --skip-loop --no-breakdown}"
  read -r -a R2_LAYERS <<<"${ROUND2_LAYER_ARGS:-}"
  read -r -a R2_TRAIN <<<"${ROUND2_TRAIN_ARGS:-}"
  echo "== round 2 (issue 25): see round2.txt" | tee -a "$OUT_DIR/summary.txt"
  {
    for cast in "" "--autocast bf16"; do
      for conv in "--stock-conv-backward" ""; do
        echo "== bench_gan ${conv:-(first-order conv backward)} ${cast:-(tf32)}"
        # shellcheck disable=SC2086
        "$PY" scripts/bench_gan.py --device "$DEVICE" "${R2_BENCH[@]}" $conv $cast | sed -n '/^| M |/,$p'
      done
    done
    for kernel in matmul stencil auto; do
      echo "== bench_gan --gossip-kernel $kernel"
      "$PY" scripts/bench_gan.py --device "$DEVICE" "${R2_BENCH[@]}" --gossip-kernel "$kernel" | sed -n '/^| M |/,$p'
    done
    echo "== bench_layers"
    "$PY" scripts/bench_layers.py --device "$DEVICE" "${R2_LAYERS[@]}"
    echo "== bench_layers --cudnn-benchmark-limit 0 (winners)"
    "$PY" scripts/bench_layers.py --device "$DEVICE" --cudnn-benchmark-limit 0 "${R2_LAYERS[@]}" | sed -n '/^winners/,$p'
    for graphs in false true; do
      for setting in "model=dcgan32 nodes=5" "model=dcgan64 dataset.image_size=64 nodes=15"; do
        name=${setting//[ =.]/_}
        dir="$WORK/r2_${graphs}_${name}"
        echo "== training run cuda.graphs=$graphs $setting"
        # shellcheck disable=SC2086
        "$PY" -m dadam3.train dataset=fake optimizer=dadam3 device="$DEVICE" loop.iterations="$ITERATIONS" \
          loop.batch_size=64 loop.log_every=25 loop.sample_every="$ITERATIONS" loop.checkpoint_every="$ITERATIONS" \
          metrics.every=0 loop.progress=false $setting cuda.graphs=$graphs "${R2_TRAIN[@]}" \
          hydra.run.dir="$dir" 2>&1 | grep -E "cuda.graphs|Error" || true
        "$PY" -c "
import json, sys
run = [r for r in map(json.loads, open(sys.argv[1])) if r.get('status') == 'running']
rate = (run[-1]['iteration'] - run[0]['iteration']) / (run[-1]['time'] - run[0]['time'])
print(f'{1e3 / rate:.1f} ms/it after iteration {run[0][\"iteration\"]}, loss_d {run[-1][\"loss_d\"]:.4g}')
" "$dir/metrics.jsonl"
      done
    done
  } 2>&1 | tee "$OUT_DIR/round2.txt"
fi
