#!/usr/bin/env bash
# Issue 31 (a) on the GPU machine: gpudiag's host phases against a hand measurement, in alternating pinned pairs of
# separate runs, from the repo root:
#
#     OUT=/some/dir [PAIRS=4] [ITERS=200] [CORE=5] [TOTAL_S=560] bash tools/gpu_phase_pairs.sh
#
# Each pair is a plain run of examples/char_gpt.py timed by hand (--phase-clock-out: the device synchronized and
# time.perf_counter read around the batch, the forward with the loss, zero_grad with the backward, and the optimizer
# step), then a light run of the same script under `gpudiag profile` without the clock; each run pinned to core $CORE
# (taskset), so the two arms of a pair run on one core of one host. Results go to /tmp/results (tarred into
# $OUT/results.tgz): run folders alt<i>/, hand clocks alt<i>_phases.json, and pairs.txt with the medians over the
# pairs (tools/phase_pairs_summary.py). tests/analyzers/test_host_code_gpu.py reads copies kept in fixtures/runs/ and
# fixtures/run_clocks/ (run folders without their trace and allocator history, for size).
PARTS=""
source tools/gpu_common.sh
for i in $(seq 1 ${PAIRS:-4}); do
  if [ $(left) -lt 60 ]; then log "no time left for pair $i"; break; fi
  log "pair $i: plain, timed by hand"
  timeout -k 10 $(( $(left) / 2 )) taskset -c ${CORE:-5} python3 examples/char_gpt.py --iters ${ITERS:-200} \
    --eval-interval 1000 --eval-batches 10 --phase-clock-out $R/alt${i}_phases.json > $L/alt${i}_plain.log 2>&1
  echo "plain rc=$?"
  log "pair $i: light"
  timeout -k 10 $(( $(left) - 20 )) taskset -c ${CORE:-5} $GD profile -q -o $R/alt$i --history-entries 0 --no-nvml \
    -- python3 examples/char_gpt.py --iters ${ITERS:-200} --eval-interval 1000 --eval-batches 10 > $L/alt${i}_light.log 2>&1
  echo "light rc=$?"
done
python3 tools/phase_pairs_summary.py $R > $R/pairs.txt 2>&1; cat $R/pairs.txt
finish
