#!/usr/bin/env bash
# Device calls (nvidia-h200) for issue 17's open parts, 2026-12-04 afternoon.
# Usage: OUT=/dir PART=a|b TOTAL_S=540 bash tools/gpu_session_issue17_c.sh
# PART a: 1. tests/gpu/test_step_inference_gpu.py light tests (JAX syncs inside the trace window)
#         2. benchmarks/jax_light_overhead.py with variants (which part of light mode costs the JAX loop)
#         3. tools/ncu_jax_crash_probe.py (does ncu crash under the JAX script without gpudiag too?)
# PART b: 1. tests/gpu/test_step_inference_gpu.py::test_no_step_ncu_falls_back_to_launches (the launch-window re-run)
#         2. benchmarks/jax_light_overhead_interleaved.py (the JAX step hook on/off in one process)
#         3. benchmarks/light_overhead_interleaved.py --trace-steps 0 at two widths
#         4. tools/ncu_jax_crash_probe.py again, ncu alone (no gpudiag)
# PART d: the JAX interleaved benchmark with GC off, and with the boundary after the dispatch (diagnostics)
# PART e: the JAX interleaved benchmark with the boundary emptied, and without memory stats and record writes
# PART f: examples/input_generator.py under light mode, kept for fixtures/runs/input_generator
# PART c: the fallback test again; the JAX interleaved benchmark with the full light arm and the proxy alone
# Results are tarred into $OUT/results.tgz.
set -u
OUT=${OUT:?set OUT}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
R=/tmp/results; L=$R/logs; mkdir -p $L; T0=$SECONDS
log() { echo "[$(date +%T)] $*"; }
left() { echo $(( ${TOTAL_S:-540} - (SECONDS - T0) )); }
{ date; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv; ncu --version | tail -1; nproc
  python3 -c "import torch, jax; print('python', __import__('sys').version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'jax', jax.__version__)"
} > $R/versions.txt 2>&1
cat $R/versions.txt
G=tests/gpu/test_step_inference_gpu.py
if [ "${PART:-a}" = a ]; then
  log "a1. light tests"
  timeout -k 10 150 python3 -m pytest $G::test_unchanged_jax_light $G::test_hand_written_sgd_light -m gpu -s -q -p no:cacheprovider --durations=0 > $L/a_light_tests.log 2>&1
  echo "rc=$?"; grep -E "summary row|passed|failed|^E |s call" $L/a_light_tests.log | tail -12
  log "a2. jax_light_overhead.py with variants"
  timeout -k 10 240 python3 benchmarks/jax_light_overhead.py --epochs 14 --repeats 3 --kinds plain,light,light-notrace,light-nonvml > $L/a_jax_overhead.log 2>&1
  echo "rc=$?"; tail -9 $L/a_jax_overhead.log
  log "a3. ncu crash probe with $(left) s"
  timeout -k 10 $(left) python3 tools/ncu_jax_crash_probe.py --repeats 3 --budget-s $(( $(left) - 100 )) --timeout-s 95 > $L/a_ncu_probe.log 2>&1
  echo "rc=$?"; cat $L/a_ncu_probe.log | tail -12
fi
if [ "${PART:-a}" = c ]; then
  log "c1. --ncu fallback test"
  timeout -k 10 200 python3 -m pytest $G::test_no_step_ncu_falls_back_to_launches -m gpu -s -q -p no:cacheprovider --durations=0 > $L/c_fallback.log 2>&1
  echo "rc=$?"; grep -E "summary row|passed|failed|^E |gpudiag:" $L/c_fallback.log | tail -8
  log "c1b. cost of the parts a JAX boundary may call, on the GPU"
  python3 - > $L/c_parts.log 2>&1 <<'PY'
import time, statistics, jax, jax.numpy as jnp, os
from diagnose.launch.runtime.memory_capture import jax_memory_stats_record
def cost(f, n=300):
    ts = []
    for _ in range(n):
        t = time.perf_counter_ns(); f(); ts.append((time.perf_counter_ns() - t) / 1e3)
    return f"median {statistics.median(ts):.1f} us, max {max(ts):.1f} us"
jnp.ones(3).block_until_ready()
print("jax_memory_stats_record", cost(lambda: jax_memory_stats_record(jax, 0, 1)))
print("jax.local_devices", cost(lambda: jax.local_devices()))
print("perf_counter_ns+time_ns", cost(lambda: (time.perf_counter_ns(), time.time_ns())))
print("nvtx env", {k: v for k, v in os.environ.items() if "NVTX" in k or "NSYS" in k or "INJECTION" in k})
PY
  cat $L/c_parts.log
  for arm in full proxy; do
    log "c2. JAX interleaved overhead, light arm $arm"
    timeout -k 10 150 python3 benchmarks/jax_light_overhead_interleaved.py --seconds 45 --light-arm $arm > $L/c_jax_interleaved_$arm.log 2>&1
    echo "rc=$?"; tail -7 $L/c_jax_interleaved_$arm.log
  done
fi
if [ "${PART:-a}" = d ]; then
  for v in "--light-arm full --no-gc" "--light-arm after-dispatch"; do
    log "d. JAX interleaved overhead $v"
    timeout -k 10 120 python3 benchmarks/jax_light_overhead_interleaved.py --seconds 40 $v > $L/d_jax_interleaved.log 2>&1
    echo "rc=$?"; tail -7 $L/d_jax_interleaved.log
  done
fi
if [ "${PART:-a}" = e ]; then
  for v in empty-boundary no-stats-no-drain; do
    log "e. JAX interleaved overhead --light-arm $v"
    timeout -k 10 100 python3 benchmarks/jax_light_overhead_interleaved.py --seconds 35 --light-arm $v > $L/e_jax_interleaved.log 2>&1
    echo "rc=$?"; tail -7 $L/e_jax_interleaved.log
  done
fi
if [ "${PART:-a}" = f ]; then
  log "f. examples/input_generator.py under light mode (fixtures/runs/input_generator)"
  mkdir -p $R/runs18
  timeout -k 5 80 python3 -m diagnose profile -o $R/runs18/input_generator -- python3 examples/input_generator.py --steps 40 --device cuda > $L/f_input_generator.log 2>&1
  echo "rc=$?"; grep gpudiag $L/f_input_generator.log | tail -3
fi
if [ "${PART:-a}" = b ]; then
  log "b1. --ncu on a short script with no step: the launch-window re-run"
  timeout -k 10 200 python3 -m pytest $G::test_no_step_ncu_falls_back_to_launches -m gpu -s -q -p no:cacheprovider --durations=0 > $L/b_fallback.log 2>&1
  echo "rc=$?"; grep -E "summary row|passed|failed|^E |gpudiag:" $L/b_fallback.log | tail -12
  log "b2. JAX interleaved overhead"
  timeout -k 10 150 python3 benchmarks/jax_light_overhead_interleaved.py --seconds 60 > $L/b_jax_interleaved.log 2>&1
  echo "rc=$?"; tail -6 $L/b_jax_interleaved.log
  for w in 1024 256; do
    log "b3. torch interleaved overhead, --trace-steps 0, width $w"
    timeout -k 10 150 python3 benchmarks/light_overhead_interleaved.py --trace-steps 0 --seconds 60 --width $w > $L/b_torch_interleaved_notrace_$w.log 2>&1
    echo "rc=$?"; tail -6 $L/b_torch_interleaved_notrace_$w.log
  done
  log "b4. ncu crash probe, more runs, with $(left) s"
  timeout -k 10 $(left) python3 tools/ncu_jax_crash_probe.py --repeats 3 --variants bare-step,bare-launch --budget-s $(( $(left) - 60 )) --timeout-s 50 > $L/b_ncu_probe.log 2>&1
  echo "rc=$?"; tail -8 $L/b_ncu_probe.log
fi
tar -czf $OUT/results.tgz -C /tmp results
log done
