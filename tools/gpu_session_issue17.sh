#!/usr/bin/env bash
# Device calls (nvidia-h200) for issue 17. Usage: OUT=/dir PART=a|b bash tools/gpu_session_issue17.sh
#   a: real traces without ProfilerStep (tools/capture_no_profilerstep.py); tests/gpu/test_step_inference_gpu.py
#      (hand-written SGD and unchanged JAX under light mode and --ncu); a real --ncu-timeout stop
#   b: benchmarks: --trace-steps 0 before/after the history fix (light_overhead.py), plain vs light on the
#      unchanged JAX loop (jax_light_overhead.py)
# Logs go straight to files under $OUT; results are tarred into $OUT/results.tgz (deep folders do not come back).
set -u
OUT=${OUT:?set OUT}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
R=/tmp/results; L=$R/logs; mkdir -p $L $R/runs; T0=$SECONDS
log() { echo "[$(date +%T)] $*"; }
{ date; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; ncu --version | tail -1
  python3 -c "import torch, jax; print('python', __import__('sys').version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'jax', jax.__version__)"
} > $R/versions.txt 2>&1
cat $R/versions.txt
if [ "${PART:-a}" = a ]; then
  log "a1. traces without ProfilerStep"
  timeout -k 10 120 python3 tools/capture_no_profilerstep.py $R/no_profilerstep > $L/capture.log 2>&1; echo "rc=$?"; tail -3 $L/capture.log
  for f in $R/no_profilerstep/*.json.gz; do
    python3 -c "
import sys; from parsers.trace import read_trace; import diagnose.trace_timeline as tl
t = read_trace(sys.argv[1]); w = tl.steps(t); print(sys.argv[1], len(t.gpu), 'gpu rows;', len(w), 'steps;', w.attrs['source'])" $f
  done
  log "a2. --ncu-timeout 20 on a long JAX run"
  s=$SECONDS
  timeout -k 10 120 python3 -m diagnose profile --ncu --ncu-timeout 20 -o $R/runs/ncu_timeout -- python3 examples/jax_unchanged.py --epochs 200 --batches 100 > $L/ncu_timeout.log 2>&1
  echo "rc=$? wall=$((SECONDS - s)) s"; grep gpudiag $L/ncu_timeout.log | tail -8
  python3 -c "import json; m = json.load(open('$R/runs/ncu_timeout/manifest.json')); print(m['status'], m['exit_code'], m['artifacts'], m['notes'][-3:], [f for f in m.get('faults', []) if f['kind'] == 'ncu-stopped'])"
  left=$(( ${TOTAL_S:-560} - (SECONDS - T0) )); log "a3. tests/gpu/test_step_inference_gpu.py with ${left} s"
  timeout -k 10 $left python3 -m pytest tests/gpu/test_step_inference_gpu.py -m gpu -s -q -p no:cacheprovider > $L/tests_gpu.log 2>&1
  echo "tests rc=$?"; grep -E "summary row|passed|failed|Error|assert" $L/tests_gpu.log | tail -30
else
  log "b1. light_overhead.py: plain, light --trace-steps 0 (history stops at step 12), the old behaviour (history until exit)"
  timeout -k 10 330 python3 benchmarks/light_overhead.py --kinds plain,light-notrace,light-notrace-history-exit --repeats 3 --steps 3000 > $L/light_overhead.log 2>&1
  echo "rc=$?"; tail -15 $L/light_overhead.log
  left=$(( ${TOTAL_S:-560} - (SECONDS - T0) )); log "b2. jax_light_overhead.py with ${left} s"
  timeout -k 10 $left python3 benchmarks/jax_light_overhead.py --repeats 3 > $L/jax_overhead.log 2>&1
  echo "rc=$?"; tail -8 $L/jax_overhead.log
fi
tar -czf $OUT/results.tgz -C /tmp results
log done
