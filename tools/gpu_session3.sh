#!/usr/bin/env bash
# GPU calls of 2026-12-03 (device tool, nvidia-h200). Usage: OUT=/dir PHASE=1|2|3|4 bash tools/gpu_session3.sh
#   PHASE 1: light-mode overhead ablation (benchmarks/light_overhead.py --ablation)
#   PHASE 2: JAX under --ncu, repeat run folders for `gpudiag diff` (issue 7), bit-identical losses (issue 8), tests/gpu
#   PHASE 3: light-mode overhead, plain/light/profiler, more repeats
#   PHASE 4: 2 and 3 in one call (repeat runs, losses, overhead, then tests/gpu with the time left)
# Every log goes straight to a file under $OUT (no pipes: a killed run must not leave a reader waiting).
set -u
OUT=${OUT:?set OUT}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
GD="python3 -m diagnose"
W=/tmp/s3; mkdir -p $W/runs $W/logs
log() { echo "[$(date +%T)] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
python3 -c "import torch, jax; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'jax', jax.__version__)"

repeat_runs() {  # fixtures/runs/repeat_a, repeat_b and their diff (issue 7)
  log "repeat run folders (diff noise)"
  for name in repeat_a repeat_b; do
    (cd examples && timeout -k 5 120 $GD profile -o $W/runs/$name --trace-start 4 --trace-steps 3 -- python3 sync_free.py --steps ${REPEAT_STEPS:-60}) > $L/$name.log 2>&1
    echo "$name rc=$?"; tail -2 $L/$name.log
  done
  (cd $W && tar czf $OUT/repeat_runs.tar.gz runs/repeat_a runs/repeat_b)
  timeout -k 5 120 $GD diff $W/runs/repeat_a $W/runs/repeat_b > $L/diff_repeat.log 2>&1; echo "diff rc=$?"; head -30 $L/diff_repeat.log
}
identical_losses() {  # issue 8 part 4
  log "bit-identical losses with and without light mode"
  (cd examples && timeout -k 5 60 python3 train_mlp.py --steps 40 --seed 3 > $L/losses_plain.txt 2>&1)
  (cd examples && timeout -k 5 90 $GD profile -o $W/runs_identical -- python3 train_mlp.py --steps 40 --seed 3 > $L/losses_light.txt 2>&1)
  grep '^step' $L/losses_plain.txt > $W/a; grep '^step' $L/losses_light.txt > $W/b
  if cmp -s $W/a $W/b; then echo "losses identical ($(wc -l < $W/a) steps)"; else echo "LOSSES DIFFER"; diff $W/a $W/b | head; fi
}

if [ "${PHASE}" = 1 ]; then
  log "light overhead ablation"
  mkdir -p $OUT/logs
  timeout -k 10 ${BENCH_S:-420} python3 benchmarks/light_overhead.py --ablation --repeats ${REPEATS:-2} > $OUT/logs/light_overhead.log 2>&1
  echo "rc=$?"; tail -16 $OUT/logs/light_overhead.log
fi

if [ "${PHASE}" = 2 ]; then
  L=$OUT/logs; mkdir -p $L
  log "JAX under --ncu, default window"
  s=$SECONDS; timeout -k 10 ${JAX_S:-110} $GD profile --ncu -o $W/runs/jax_ncu -- python3 examples/train_jax.py --steps 12 > $L/jax_ncu.log 2>&1
  jrc=$?; echo "jax ncu rc=$jrc wall_s=$((SECONDS-s))"; tail -12 $L/jax_ncu.log; ls -la $W/runs/jax_ncu/ncu 2>&1 | tail -4
  repeat_runs
  identical_losses
  log "tests/gpu"
  K="${TESTS_K:-}"; [ $jrc -ne 0 ] && K="not jax_ncu"
  timeout -k 10 ${TESTS_S:-300} python3 -m pytest tests/gpu -m gpu -s -q -p no:cacheprovider ${K:+-k "$K"} > $L/tests_gpu.log 2>&1
  echo "tests/gpu rc=$? (-k '$K')"; tail -30 $L/tests_gpu.log
fi

if [ "${PHASE}" = 4 ]; then  # everything of 2 and 3 in one call, cheapest first, tests/gpu gets what time is left
  L=$OUT/logs; mkdir -p $L; T0=$SECONDS
  repeat_runs
  identical_losses
  log "light overhead, plain/light/profiler"
  timeout -k 10 ${BENCH_S:-170} python3 benchmarks/light_overhead.py --repeats ${REPEATS:-3} > $L/light_overhead2.log 2>&1
  echo "rc=$?"; tail -9 $L/light_overhead2.log
  left=$(( ${TOTAL_S:-540} - (SECONDS - T0) )); log "tests/gpu with ${left} s"
  timeout -k 10 $left python3 -m pytest tests/gpu -m gpu -s -q -p no:cacheprovider > $L/tests_gpu.log 2>&1
  echo "tests/gpu rc=$?"; grep -E "summary row|passed|failed|Error|assert" $L/tests_gpu.log | tail -30
fi

if [ "${PHASE}" = 3 ]; then
  mkdir -p $OUT/logs
  timeout -k 10 ${BENCH_S:-300} python3 benchmarks/light_overhead.py --repeats ${REPEATS:-7} > $OUT/logs/light_overhead2.log 2>&1
  echo "rc=$?"; tail -14 $OUT/logs/light_overhead2.log
fi
log done
