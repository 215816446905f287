#!/usr/bin/env bash
# Device call (nvidia-h200) for issues 17 and 18, 2026-12-04 evening, after the jit boundary was made cheaper.
# Usage: OUT=/dir TOTAL_S=560 bash tools/gpu_session_issue17_18_f.sh
#   1. tests/gpu/test_periodic_work_gpu.py (checkpoint and evaluation named in the periodic finding)
#   1b. examples/jax_recompile.py under light mode and its report
#   2. tests/gpu/test_step_inference_gpu.py light tests (SGD and JAX: steps, sources, sync lines)
#   3. benchmarks/jax_light_overhead_interleaved.py at widths 512 and 2048
#   4. benchmarks/light_overhead_interleaved.py --trace-steps 0 (torch: the shared boundary did not get slower)
source tools/gpu_session_common.sh
G=tests/gpu/test_step_inference_gpu.py
log "1. periodic work on the GPU"
timeout -k 5 150 python3 -m pytest tests/gpu/test_periodic_work_gpu.py -m gpu -s -q -p no:cacheprovider --durations=0 > $L/periodic_work.log 2>&1
echo "rc=$?"; grep -E "summary row|passed|failed|^E " $L/periodic_work.log | cut -c1-400 | tail -8
log "1b. examples/jax_recompile.py under light mode (compilation kept apart)"
timeout -k 5 120 python3 -m diagnose profile -q -o $R/jax_recompile -- python3 examples/jax_recompile.py --steps 120 --new-every 15 > $L/jax_recompile.log 2>&1
echo "rc=$?"; timeout 60 python3 -m diagnose report $R/jax_recompile --json $R/jax_recompile.json > /dev/null 2>&1
python3 -c "
import json; d = json.load(open('$R/jax_recompile.json'))
for f in d['findings'][:4]: print(' ', f['id'], round(f.get('cost_share') or 0, 3), f['title'][:300])
"
log "2. light tests"
timeout -k 10 150 python3 -m pytest $G::test_unchanged_jax_light $G::test_hand_written_sgd_light -m gpu -s -q -p no:cacheprovider --durations=0 > $L/light_tests.log 2>&1
echo "rc=$?"; grep -E "summary row|passed|failed|^E " $L/light_tests.log | cut -c1-400 | tail -8
for w in 512 2048; do
  log "3. JAX interleaved overhead, width $w"
  timeout -k 10 110 python3 benchmarks/jax_light_overhead_interleaved.py --seconds 50 --width $w > $L/jax_interleaved_$w.log 2>&1
  echo "rc=$?"; tail -7 $L/jax_interleaved_$w.log
done
s=$(( $(left) - 40 )); [ $s -gt 60 ] && s=60
if [ $s -ge 20 ]; then
  log "4. torch interleaved overhead, --trace-steps 0, $s s"
  timeout -k 10 $(( s + 60 )) python3 benchmarks/light_overhead_interleaved.py --trace-steps 0 --seconds $s > $L/torch_interleaved.log 2>&1
  echo "rc=$?"; tail -7 $L/torch_interleaved.log
fi
tar -czf $OUT/results.tgz -C /tmp results
log done
