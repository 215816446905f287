#!/usr/bin/env bash
# Run tests/gpu on the GPU machine (the device tool's H200), from the repo root:
#
#     OUT=/some/dir [TESTS="tests/gpu/test_x.py::test_y ..."] [K="not jax_ncu"] [REPEAT=1] [TOTAL_S=560] \
#         bash tools/gpu_run_tests.sh
#
# TESTS: which tests (default: all of tests/gpu); K: a pytest -k expression; REPEAT: run them this many times while
# at least 100 s of TOTAL_S are left (a flaky test, e.g. ncu crashing under JAX, run again and again). Each run gets
# the seconds left; its log is /tmp/results/logs/tests_gpu_<i>.log, tarred into $OUT/results.tgz, and its summary
# lines are printed. The run folders' small files (events, memory stats, manifests, findings, ncu logs) come back in
# /tmp/results/runs_<i>.tgz. The whole of tests/gpu no longer fits one call (2026-12-06, an H100: cut off at 541 s
# in the sixth of seven files): split it with TESTS, e.g. test_launch_gpu.py and test_input_wait_gpu.py in one call,
# the other files in the next. Fixtures are captured with tools/gpu_capture_fixtures.sh, overhead measured with
# tools/gpu_overhead.sh.
PARTS=""
source tools/gpu_common.sh
i=0
while [ $i -lt ${REPEAT:-1} ]; do
  i=$((i + 1))
  if [ $i -gt 1 ] && [ $(left) -lt 100 ]; then
    log "no time left for run $i"
    break
  fi
  log "tests/gpu run $i with $(left) s"
  rm -rf /tmp/pt
  timeout -k 10 $(( $(left) - 10 )) python3 -m pytest ${TESTS:-tests/gpu} -m gpu -rxX -s -q -p no:cacheprovider \
    --durations=0 --basetemp=/tmp/pt ${K:+-k "$K"} > $L/tests_gpu_$i.log 2>&1
  echo "tests/gpu rc=$?"
  (cd /tmp/pt 2>/dev/null && find . \( -name "*.jsonl" -o -name "manifest.json" -o -name "findings.json" \
    -o -name "ncu.log" \) -size -3M | tar -czf $R/runs_$i.tgz -T -)
  grep -E "summary row|passed|failed|xfail|XFAIL|Segmentation|Error|^E |s call" $L/tests_gpu_$i.log | cut -c1-400 | tail -30
done
finish
