#!/usr/bin/env bash
# Device call (nvidia-h200) for issue 17, 2026-12-04 evening: does excluding XLA's compiler processes from ncu's
# process tracking (ncu.HELPER_PROCESSES) stop ncu's crash under JAX?
# Usage: OUT=/dir TOTAL_S=560 bash tools/gpu_session_issue17_18_e.sh
#   1. tools/ncu_jax_crash_probe.py: bare-step (gpudiag's command now, with the exclusion) against no-filter (before)
#   2. tests/gpu test_unchanged_jax_ncu three times (gpudiag profile --ncu on the unchanged JAX script)
source tools/gpu_session_common.sh
G=tests/gpu/test_step_inference_gpu.py
log "1. ncu crash probe: with and without the helper-process exclusion"
timeout -k 10 300 python3 tools/ncu_jax_crash_probe.py --repeats 4 --timeout-s 60 --budget-s 250 \
  --variants bare-step,no-filter --keep $R/probe > $L/probe.log 2>&1
echo "rc=$?"; cut -c1-330 $L/probe.log
find $R/probe -name "*.ncu-rep" -delete 2>/dev/null
for i in 1 2 3; do
  [ $(left) -lt 100 ] && { log "no time left for run $i"; break; }
  log "2. test_unchanged_jax_ncu run $i"
  timeout -k 10 $(( $(left) - 10 )) python3 -m pytest $G::test_unchanged_jax_ncu -m gpu -rxX -s -q -p no:cacheprovider --durations=0 > $L/jax_ncu_$i.log 2>&1
  echo "rc=$?"; grep -E "summary row|passed|failed|xfail|XFAIL|^E " $L/jax_ncu_$i.log | cut -c1-400 | tail -4
done
tar -czf $OUT/results.tgz -C /tmp results
log done
