#!/usr/bin/env bash
# Measure light mode's overhead on the GPU machine (the device tool's H200), from the repo root:
#
#     OUT=/some/dir [PARTS="interleaved paired ..."] [TOTAL_S=560] bash tools/gpu_overhead.sh
#
# Each part runs one benchmark with the arguments in its variable (the benchmark's own defaults when empty) under
# the time limit in <PART>_S; logs and JSON go to /tmp/results, tarred into $OUT/results.tgz. The numbers kept are in
# docs/measurements/. Parts (default: interleaved paired jax_interleaved):
#   light            benchmarks/light_overhead.py $LIGHT_ARGS: plain vs light vs torch.profiler, whole processes
#                    (e.g. LIGHT_ARGS="--ablation --repeats 2", or "--kinds plain,light-notrace --steps 1500")
#   interleaved      benchmarks/light_overhead_interleaved.py $INTERLEAVED_ARGS: light mode on and off every few
#                    steps in one process (e.g. "--run-steps 12", "--width 256"; "--arms
#                    light,no-sampler,no-forward,no-phases,no-events,plain,plain-b" also times light with one part
#                    paused: the long-step sampler, the forward timer, the backward/optimizer phase timers, the CUDA
#                    events; "--split" prints each arm's batch/forward/backward/optimizer/item segments)
#   paired           benchmarks/light_overhead_paired.py $PAIRED_ARGS: light vs plain vs torch.profiler in blocks
#   probes           tools/event_cost_probe.py and tools/boundary_breakdown.py: what an event record costs, where
#                    the step boundary's own time goes
#   jax              benchmarks/jax_light_overhead.py $JAX_ARGS: plain vs light on the unchanged JAX loop
#   jax_interleaved  benchmarks/jax_light_overhead_interleaved.py $JAX_INTERLEAVED_ARGS, once per width in
#                    $JAX_WIDTHS (default 512 2048)
#   loop_input       benchmarks/loop_input_overhead.py $LOOP_INPUT_ARGS: the loop watcher's cost per iteration
# The tests on the GPU are tools/gpu_run_tests.sh; fixtures are captured with tools/gpu_capture_fixtures.sh.
PARTS=${PARTS:-interleaved paired jax_interleaved}
source tools/gpu_common.sh
clocks() { nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader; }

if want light; then
  log "light_overhead.py ${LIGHT_ARGS:-}"
  timeout -k 10 ${LIGHT_S:-300} python3 benchmarks/light_overhead.py ${LIGHT_ARGS:-} > $L/light_overhead.log 2>&1
  echo "rc=$?"; tail -16 $L/light_overhead.log; clocks
fi

if want interleaved; then
  log "light_overhead_interleaved.py ${INTERLEAVED_ARGS:-}"
  timeout -k 10 ${INTERLEAVED_S:-240} python3 benchmarks/light_overhead_interleaved.py ${INTERLEAVED_ARGS:-} \
    --json $R/interleaved.json > $L/interleaved.log 2>&1
  echo "rc=$?"; grep -v USDT $L/interleaved.log | tail -12; clocks
fi

if want paired; then
  log "light_overhead_paired.py ${PAIRED_ARGS:-}"
  timeout -k 10 ${PAIRED_S:-330} python3 benchmarks/light_overhead_paired.py ${PAIRED_ARGS:-} --json $R/paired.json \
    > $L/paired.log 2> $L/paired_blocks.log
  echo "rc=$?"; cat $L/paired.log; tail -3 $L/paired_blocks.log; clocks
fi

if want probes; then
  log "event cost probe"
  timeout -k 5 60 python3 tools/event_cost_probe.py > $L/probe.log 2>&1; echo "probe rc=$?"; cat $L/probe.log
  log "boundary breakdown"
  timeout -k 5 90 python3 tools/boundary_breakdown.py > $L/breakdown.log 2>&1; echo "breakdown rc=$?"; grep -v USDT $L/breakdown.log
fi

if want jax; then
  log "jax_light_overhead.py ${JAX_ARGS:-}"
  timeout -k 10 ${JAX_S:-240} python3 benchmarks/jax_light_overhead.py ${JAX_ARGS:-} > $L/jax_overhead.log 2>&1
  echo "rc=$?"; tail -9 $L/jax_overhead.log
fi

if want jax_interleaved; then
  for w in ${JAX_WIDTHS:-512 2048}; do
    log "jax_light_overhead_interleaved.py --width $w ${JAX_INTERLEAVED_ARGS:-}"
    timeout -k 10 ${JAX_INTERLEAVED_S:-110} python3 benchmarks/jax_light_overhead_interleaved.py --width $w \
      ${JAX_INTERLEAVED_ARGS:-} > $L/jax_interleaved_$w.log 2>&1
    echo "rc=$?"; tail -7 $L/jax_interleaved_$w.log
  done
fi

if want loop_input; then
  log "loop_input_overhead.py ${LOOP_INPUT_ARGS:-}"
  timeout -k 5 ${LOOP_INPUT_S:-40} python3 benchmarks/loop_input_overhead.py ${LOOP_INPUT_ARGS:-} > $L/loop_input_overhead.log 2>&1
  echo "rc=$?"; cat $L/loop_input_overhead.log
fi

finish
