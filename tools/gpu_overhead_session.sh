#!/usr/bin/env bash
# One device call (nvidia-h200) for light mode's overhead, as run on 2026-12-03. Usage: OUT=/dir bash tools/gpu_overhead_session.sh
# (env INTERLEAVED_S, INTERLEAVED_RUN_STEPS: the interleaved benchmark's seconds and runs (space-separated,
#  one run per value); PAIRED_S, PAIRED_MAX_S, PAIRED_KINDS: the paired one's; TOTAL_S: the whole call's;
#  PROBES=0 skips step 3)
#   1. benchmarks/light_overhead_interleaved.py: light mode's steady-state cost, on and off every few steps (issue 3)
#   2. benchmarks/light_overhead_paired.py: light mode vs plain vs torch.profiler in blocks, in the same process
#   3. tools/event_cost_probe.py and tools/boundary_breakdown.py: what an event record costs, where the
#      boundary's own time goes
#   4. tests/gpu with the time left
# Every log goes straight to a file under $OUT (no pipes: a killed run must not leave a reader waiting).
set -u
OUT=${OUT:?set OUT}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L; T0=$SECONDS
log() { echo "[$(date +%T)] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
python3 -c "import torch, jax; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'jax', jax.__version__)"

for run_steps in ${INTERLEAVED_RUN_STEPS:-4}; do
  log "interleaved light-mode overhead, runs of $run_steps steps"
  timeout -k 10 $(( ${INTERLEAVED_S:-150} + 90 )) python3 benchmarks/light_overhead_interleaved.py \
    --seconds ${INTERLEAVED_S:-150} --run-steps $run_steps --json $OUT/interleaved_$run_steps.json \
    > $L/interleaved_$run_steps.log 2>&1
  echo "interleaved rc=$?"; grep -v USDT $L/interleaved_$run_steps.log
done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader

log "paired light-mode overhead"
timeout -k 10 ${PAIRED_S:-330} python3 benchmarks/light_overhead_paired.py --max-seconds ${PAIRED_MAX_S:-250} \
  --kinds ${PAIRED_KINDS:-light,light-late,control,profiler} --json $OUT/paired.json > $L/paired.log 2> $L/paired_blocks.log
echo "paired rc=$?"; cat $L/paired.log; tail -3 $L/paired_blocks.log
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader

if [ "${PROBES:-1}" != 0 ]; then
  log "event cost probe"
  timeout -k 5 60 python3 tools/event_cost_probe.py > $L/probe.log 2>&1; echo "probe rc=$?"; cat $L/probe.log
  log "boundary breakdown"
  timeout -k 5 90 python3 tools/boundary_breakdown.py > $L/breakdown.log 2>&1; echo "breakdown rc=$?"; grep -v USDT $L/breakdown.log
fi

left=$(( ${TOTAL_S:-570} - (SECONDS - T0) )); log "tests/gpu with ${left} s"
if [ $left -gt 60 ]; then
  timeout -k 10 $left python3 -m pytest tests/gpu -m gpu -s -q -p no:cacheprovider > $L/tests_gpu.log 2>&1
  echo "tests/gpu rc=$?"; grep -E "summary row|passed|failed|Error|assert" $L/tests_gpu.log | tail -30
fi
log done
