#!/usr/bin/env bash
# Device calls (nvidia-h200) for issues 17 and 18. Usage: OUT=/dir PART=a|b TOTAL_S=540 bash tools/gpu_session_issue17_18.sh
# PART a:
#   1. issue 18's examples under light mode (run folders kept for fixtures/runs/): input_bound, epoch_stall, sync_heavy
#   2. --ncu-timeout 20 on a long unchanged JAX run, and whether any of its processes outlive gpudiag
#   3. tests/gpu/test_step_inference_gpu.py (hand-written SGD, unchanged JAX, time slices; light and --ncu)
# PART b:
#   1. --ncu-timeout on a long JAX run from pytest (tests/gpu: output through pipes), and once with ncu's output
#      going to a file, where ncu crashed twice ("Segmentation fault", exit 139) in PART a
#   2. benchmarks: light_overhead.py (plain, --trace-steps 0, the old history-until-exit) at two run lengths,
#      jax_light_overhead.py (plain vs light on the unchanged JAX loop)
# PART c: the --ncu-timeout test, then the unchanged-JAX --ncu test repeated while time is left (ncu crashed
#   under it in most runs; on 2026-12-04 the tree under test also turned XLA command buffers off, which did not help)
# The no-ProfilerStep traces of fixtures/trace/no_profilerstep: PYTHONPATH=$PWD python3 tools/capture_no_profilerstep.py OUT
# Results are tarred into $OUT/results.tgz.
set -u
OUT=${OUT:?set OUT}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
R=/tmp/results; L=$R/logs; mkdir -p $L $R/runs18; T0=$SECONDS
log() { echo "[$(date +%T)] $*"; }
{ date; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; ncu --version | tail -1; nproc
  python3 -c "import torch, jax; print('python', __import__('sys').version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'jax', jax.__version__)"
} > $R/versions.txt 2>&1
cat $R/versions.txt
if [ "${PART:-a}" = c ]; then
  log "c1. XLA_FLAGS=--xla_gpu_enable_command_buffer= is accepted"
  XLA_FLAGS=--xla_gpu_enable_command_buffer= python3 -c "import jax, jax.numpy as jnp; print('ok', float(jnp.ones(3).sum()))" 2>&1 | tail -2
  G=tests/gpu/test_step_inference_gpu.py
  log "c2. --ncu-timeout test"
  timeout -k 10 150 python3 -m pytest $G::test_ncu_timeout_stops_a_long_jax_run -m gpu -s -q -p no:cacheprovider > $L/c_timeout.log 2>&1
  echo "rc=$?"; grep -E "summary row|passed|failed|^E " $L/c_timeout.log | tail -6
  i=0
  while [ $(( ${TOTAL_S:-330} - (SECONDS - T0) )) -gt 100 ]; do
    i=$((i + 1)); log "c3.$i unchanged JAX under --ncu"
    timeout -k 10 190 python3 -m pytest $G::test_unchanged_jax_ncu -m gpu -s -q -p no:cacheprovider > $L/c_jax_ncu_$i.log 2>&1
    echo "rc=$?"; grep -E "summary row|passed|failed|Segmentation|^E " $L/c_jax_ncu_$i.log | tail -5
  done
  tar -czf $OUT/results.tgz -C /tmp results
  log done
  exit 0
fi
if [ "${PART:-a}" = b ]; then
  log "b1. --ncu-timeout from pytest"
  timeout -k 10 150 python3 -m pytest tests/gpu/test_step_inference_gpu.py::test_ncu_timeout_stops_a_long_jax_run -m gpu -s -q -p no:cacheprovider > $L/ncu_timeout_test.log 2>&1
  echo "rc=$?"; grep -E "summary row|passed|failed|assert" $L/ncu_timeout_test.log | tail -6
  log "b1'. the same JAX script under --ncu, output to a file"
  s=$SECONDS
  python3 -m diagnose profile --ncu --ncu-timeout 30 -o $R/runs/ncu_file -- python3 examples/jax_unchanged.py --epochs 1 --batches 20 > $L/ncu_file.log 2>&1 < /dev/null
  echo "rc=$? wall=$((SECONDS - s)) s"; grep -E "gpudiag|Segmentation" $L/ncu_file.log | tail -4
  log "b2. light_overhead.py at two run lengths"
  for steps in 1500 3000; do
    timeout -k 10 200 python3 benchmarks/light_overhead.py --kinds plain,light-notrace,light-notrace-history-exit --repeats 3 --steps $steps > $L/light_overhead_$steps.log 2>&1
    echo "steps=$steps rc=$?"; tail -8 $L/light_overhead_$steps.log
  done
  left=$(( ${TOTAL_S:-560} - (SECONDS - T0) )); log "b3. jax_light_overhead.py with ${left} s"
  timeout -k 10 $left python3 benchmarks/jax_light_overhead.py --repeats 3 > $L/jax_overhead.log 2>&1
  echo "rc=$?"; tail -8 $L/jax_overhead.log
  tar -czf $OUT/results.tgz -C /tmp results
  log done
  exit 0
fi
log "1. issue 18 examples under light mode"
for spec in "input_bound --steps 60" "epoch_stall --epochs 5 --batches-per-epoch 20" "sync_heavy --steps 60"; do
  set -- $spec; name=$1; shift
  s=$SECONDS
  timeout -k 10 120 python3 -m diagnose profile -o $R/runs18/$name -- python3 examples/$name.py "$@" --device cuda > $L/$name.log 2>&1
  echo "$name rc=$? wall=$((SECONDS - s)) s"; grep gpudiag $L/$name.log | tail -2
  timeout 120 python3 -m diagnose report --json -o $R/runs18/$name.findings.json $R/runs18/$name > $L/$name.report.log 2>&1
  python3 -c "
import json, sys; d = json.load(open(sys.argv[1]))
print([(f['id'], f['severity'], f['title'][:150]) for f in d['findings']][:6])" $R/runs18/$name.findings.json
done
log "2. --ncu-timeout 20 on a long JAX run"
s=$SECONDS
timeout -k 10 120 python3 -m diagnose profile --ncu --ncu-timeout 20 -o $R/runs/ncu_timeout -- python3 examples/jax_unchanged.py --epochs 200 --batches 100 > $L/ncu_timeout.log 2>&1
echo "rc=$? wall=$((SECONDS - s)) s"; grep gpudiag $L/ncu_timeout.log | tail -8
sleep 2; echo "left running after gpudiag: $(pgrep -f 'jax_unchanged.py --epochs 200' | wc -l) process(es)"
python3 -c "import json; m = json.load(open('$R/runs/ncu_timeout/manifest.json')); print(m['status'], m['exit_code'], m['artifacts'], m['notes'][-3:], m.get('faults', [])[-2:])"
left=$(( ${TOTAL_S:-540} - (SECONDS - T0) )); log "3. tests/gpu/test_step_inference_gpu.py with ${left} s"
G=tests/gpu/test_step_inference_gpu.py
timeout -k 10 $left python3 -m pytest $G::test_hand_written_sgd_light $G::test_unchanged_jax_light $G::test_time_slices_light $G::test_hand_written_sgd_ncu $G::test_time_slices_ncu $G::test_unchanged_jax_ncu -m gpu -s -q -p no:cacheprovider --durations=0 > $L/tests_gpu.log 2>&1
echo "tests rc=$?"; grep -E "summary row|passed|failed|Error|assert|s call" $L/tests_gpu.log | tail -30
tar -czf $OUT/results.tgz -C /tmp results
log done
