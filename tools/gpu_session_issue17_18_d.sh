#!/usr/bin/env bash
# Device call (nvidia-h200) for issues 17 and 18, 2026-12-04 evening.
# Usage: OUT=/dir TOTAL_S=560 bash tools/gpu_session_issue17_18_d.sh
#   1. tools/ncu_jax_crash_probe.py with workarounds (application-only, XLA flags) and a child-process census
#   2. examples/input_generator.py under light mode, kept for fixtures/runs/input_generator
#   3. tests/gpu/test_input_wait_gpu.py (the generator-fed loop's budget on the GPU)
#   4. benchmarks/loop_input_overhead.py on the H200 host (the loop watcher's cost per iteration)
#   5. benchmarks/jax_light_overhead_interleaved.py at widths 512 and 2048
# Results are tarred into $OUT/results.tgz.
source tools/gpu_session_common.sh
ncu --help > $L/ncu_help.txt 2>&1; grep -A12 -- "--target-processes" $L/ncu_help.txt | head -30
log "1. ncu crash probe with workarounds"
timeout -k 10 230 python3 tools/ncu_jax_crash_probe.py --repeats 2 --timeout-s 60 --budget-s 170 \
  --variants no-ncu,bare-step,app-only,no-cmdbuf,no-autotune,one-compile-thread --keep $R/probe > $L/probe.log 2>&1
echo "rc=$?"; cut -c1-400 $L/probe.log
find $R/probe -name "*.ncu-rep" -delete 2>/dev/null
log "2. examples/input_generator.py under light mode"
mkdir -p $R/runs18
timeout -k 5 80 python3 -m diagnose profile -o $R/runs18/input_generator -- python3 examples/input_generator.py --steps 40 --device cuda > $L/input_generator.log 2>&1
echo "rc=$?"; grep gpudiag $L/input_generator.log | tail -3
log "3. tests/gpu/test_input_wait_gpu.py"
timeout -k 5 100 python3 -m pytest tests/gpu/test_input_wait_gpu.py -m gpu -s -q -p no:cacheprovider --durations=0 > $L/test_input_wait_gpu.log 2>&1
echo "rc=$?"; grep -E "summary row|passed|failed|^E " $L/test_input_wait_gpu.log | tail -8
log "4. loop watcher cost on this host"
timeout -k 5 40 python3 benchmarks/loop_input_overhead.py --seconds 15 > $L/loop_input_overhead.log 2>&1
echo "rc=$?"; cat $L/loop_input_overhead.log
for w in 512 2048; do
  s=$(( $(left) / 2 - 20 )); [ $s -gt 45 ] && s=45
  [ $s -lt 15 ] && { log "no time left for width $w"; continue; }
  log "5. JAX interleaved overhead, width $w, $s s"
  timeout -k 10 $(( s + 60 )) python3 benchmarks/jax_light_overhead_interleaved.py --seconds $s --width $w > $L/jax_interleaved_$w.log 2>&1
  echo "rc=$?"; tail -7 $L/jax_interleaved_$w.log
  [ $w = 512 ] || break
done
tar -czf $OUT/results.tgz -C /tmp results
log done
