#!/usr/bin/env bash
# Capture, on the GPU machine (the device tool's H200), every GPU fixture a test reads. Run from the repo root:
#
#     OUT=/some/dir [PARTS="ncu memory ..."] [TOTAL_S=560] bash tools/gpu_capture_fixtures.sh
#
# Each part writes under /tmp/results/<part's folder>, tarred into $OUT/results.tgz; the fixture's PROVENANCE.md
# names its part and says which captured files became the fixture (compressed with gzip -9, trimmed or not).
#   ncu              fixtures/ncu/{l2_random_gather,matmul_tiled,tiny_kernels,small_grid,two_process_stdout}: ncu
#                    with four sections of each planted example, exported as every CSV form        -> ncu/
#   kinds            fixtures/ncu/kernel_kinds: ncu --set full of examples/ncu_kernel_kinds.py, every export  -> kinds/
#   memory           fixtures/memory/{churn,expandable,ring,oom}: the allocator examples' snapshots and stats -> memory/
#   trace            fixtures/trace/{sync_planted,sync_free,jax}, fixtures/memory/jax, fixtures/events: Kineto and
#                    JAX traces of the sync examples and the self-traced JAX loop, NVML sampled meanwhile -> trace/
#   no_profilerstep  fixtures/trace/no_profilerstep: torch.profiler traces without ProfilerStep   -> no_profilerstep/
#   runs             fixtures/runs/{sync_planted,sync_free,mem_churn,jax_train,torchrun_mlp,ncu_mlp}: gpudiag profile
#                    run folders (run in examples/)                                                -> runs/
#   repeat           fixtures/runs/{repeat_a,repeat_b}: the same script twice, and their gpudiag diff -> runs/
#   losses           light mode does not change results: train_mlp.py's losses with and without gpudiag profile
#   ncu_runs         fixtures/runs/{ncu_kinds,ncu_churn}: gpudiag profile --ncu with its default sections -> runs/
#   runs18           fixtures/runs/{input_bound,epoch_stall,sync_heavy}: issue 18's examples in light mode -> runs18/
#   input_generator  fixtures/runs/input_generator_h200: the generator-fed loop in light mode     -> runs18/
# The tests on the GPU are tools/gpu_run_tests.sh; light mode's overhead is tools/gpu_overhead.sh.
PARTS=${PARTS:-ncu kinds memory trace no_profilerstep runs repeat losses ncu_runs runs18 input_generator}
source tools/gpu_common.sh

if want ncu; then
  log "ncu: the planted scenarios"
  W=$R; mkdir -p $W/ncu
  SECTIONS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats"
  EXTRA="--metrics lts__t_sector_op_read_hit_rate.pct,lts__t_sector_op_write_hit_rate.pct"
  for ex in ncu_l2_random_gather ncu_matmul_tiled ncu_tiny_kernels ncu_small_grid; do
    log "ncu $ex"
    start=$SECONDS
    $NCU --clock-control none --target-processes all --profile-from-start off $SECTIONS $EXTRA \
         --import-source no -f -o $W/ncu/$ex python3 examples/$ex.py > $W/ncu/$ex.log 2>&1
    echo "rc=$? wall_s=$((SECONDS - start))" >> $W/ncu/$ex.log
    tail -3 $W/ncu/$ex.log
    $NCU --import $W/ncu/$ex.ncu-rep --csv --page raw > $W/ncu/${ex}_raw.csv 2>>$W/ncu/$ex.log
    $NCU --import $W/ncu/$ex.ncu-rep --csv --page raw --print-units base > $W/ncu/${ex}_raw_base.csv 2>>$W/ncu/$ex.log
    $NCU --import $W/ncu/$ex.ncu-rep --csv --page details > $W/ncu/${ex}_details.csv 2>>$W/ncu/$ex.log
    gzip -9 $W/ncu/$ex.ncu-rep
  done
  log "ncu stdout, two processes"
  $NCU --clock-control none --target-processes all --profile-from-start off --csv --page raw \
       --metrics gpu__time_duration.sum,lts__t_sector_hit_rate.pct,launch__grid_size,launch__block_size,sm__warps_active.avg.pct_of_peak_sustained_active \
       sh -c "python3 examples/ncu_small_grid.py; python3 examples/ncu_tiny_kernels.py" > $W/ncu/two_process_stdout.csv 2>&1
  ls -la $W/ncu
fi

if want kinds; then
  log "ncu --set full: kernel kinds"
  K=$R/kinds; mkdir -p $K; cp $R/versions.txt $K/
  start=$SECONDS
  timeout -k 10 ${NCU_S:-240} $NCU --clock-control none --set full --import-source yes -f -o $K/report \
    python3 examples/ncu_kernel_kinds.py > $K/ncu_console.log 2>&1
  echo "ncu rc=$? wall_s=$((SECONDS - start))"; tail -4 $K/ncu_console.log
  if [ -f $K/report.ncu-rep ]; then
    $NCU --import $K/report.ncu-rep --csv --page raw > $K/raw.csv 2>>$L/export.log
    $NCU --import $K/report.ncu-rep --csv --page raw --print-units base > $K/raw_base.csv 2>>$L/export.log
    $NCU --import $K/report.ncu-rep --csv --page details > $K/details.csv 2>>$L/export.log
    $NCU --import $K/report.ncu-rep --csv --page source --print-source sass,cuda > $K/source.csv 2>>$L/export.log
    $GD report $K/report.ncu-rep --no-html --json $K/findings.json > $L/report_kinds.log 2>&1
    echo "report rc=$?"; head -30 $L/report_kinds.log
    gzip -9 $K/report.ncu-rep $K/raw.csv $K/details.csv $K/source.csv
    ls -la $K
  fi
fi

if want memory; then
  log "memory"
  W=$R; mkdir -p $W/memory
  (cd examples && python3 mem_churn.py $W/memory/churn) > $L/memory_churn.log 2>&1; tail -2 $L/memory_churn.log
  (cd examples && PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 mem_churn.py $W/memory/expandable) > $L/memory_expandable.log 2>&1; tail -2 $L/memory_expandable.log
  (cd examples && python3 mem_churn.py $W/memory/ring --max-entries 3000) > $L/memory_ring.log 2>&1; tail -2 $L/memory_ring.log
  (cd examples && python3 mem_oom.py $W/memory/oom) > $L/memory_oom.log 2>&1; tail -2 $L/memory_oom.log
fi

if want trace; then
  log "trace + nvml"
  W=$R; mkdir -p $W/trace
  python3 - $W/trace/nvml.csv <<'PY' &
import sys, time, pynvml
pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)
f = open(sys.argv[1], "w")
f.write("t_ns,gpu,gpu_util_pct,mem_util_pct,mem_used_bytes,mem_total_bytes,sm_clock_mhz,mem_clock_mhz,power_w,pcie_tx_bytes_per_s,pcie_rx_bytes_per_s,temperature_c\n")
end = time.time() + 240
while time.time() < end:
    u = pynvml.nvmlDeviceGetUtilizationRates(h); m = pynvml.nvmlDeviceGetMemoryInfo(h)
    def g(fn, *a):
        try: return fn(h, *a)
        except pynvml.NVMLError: return ""
    tx = g(pynvml.nvmlDeviceGetPcieThroughput, pynvml.NVML_PCIE_UTIL_TX_BYTES)
    rx = g(pynvml.nvmlDeviceGetPcieThroughput, pynvml.NVML_PCIE_UTIL_RX_BYTES)
    p = g(pynvml.nvmlDeviceGetPowerUsage)
    f.write(f"{time.time_ns()},0,{u.gpu},{u.memory},{m.used},{m.total},{g(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_SM)},"
            f"{g(pynvml.nvmlDeviceGetClockInfo, pynvml.NVML_CLOCK_MEM)},{'' if p == '' else p / 1000},"
            f"{'' if tx == '' else tx * 1024},{'' if rx == '' else rx * 1024},{g(pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU)}\n")
    f.flush(); time.sleep(0.05)
PY
  NVML_PID=$!
  python3 examples/sync_planted.py $W/trace/sync_planted > $L/trace_sync_planted.log 2>&1; tail -2 $L/trace_sync_planted.log
  python3 examples/sync_free.py $W/trace/sync_free > $L/trace_sync_free.log 2>&1; tail -2 $L/trace_sync_free.log
  log "jax"
  python3 examples/jax_self_traced.py $W/trace/jax > $L/trace_jax.log 2>&1; tail -3 $L/trace_jax.log
  kill $NVML_PID 2>/dev/null
  find $W/trace/jax -type f | head
fi

if want no_profilerstep; then
  log "traces without ProfilerStep"
  timeout -k 5 ${NO_PROFILERSTEP_S:-240} python3 tools/capture_no_profilerstep.py $R/no_profilerstep > $L/no_profilerstep.log 2>&1
  echo "rc=$?"; tail -4 $L/no_profilerstep.log; ls -la $R/no_profilerstep
fi

if want runs; then
  log "light-mode and --ncu run folders"
  W=$R; mkdir -p $W/runs
  (cd examples && timeout 300 $GD profile -o $W/runs/sync_planted --trace-start 4 --trace-steps 3 -- python3 sync_planted.py) > $L/sync_planted.log 2>&1; echo "rc=$?"; tail -3 $L/sync_planted.log
  (cd examples && timeout 300 $GD profile -o $W/runs/sync_free --trace-start 4 --trace-steps 3 -- python3 sync_free.py) > $L/sync_free.log 2>&1; echo "rc=$?"; tail -2 $L/sync_free.log
  (cd examples && timeout 300 $GD profile -o $W/runs/mem_churn --trace-start 10 --trace-steps 2 --snapshot-at exit -- python3 mem_churn.py /tmp/cap2/mem_churn_own) > $L/mem_churn.log 2>&1; echo "rc=$?"; tail -2 $L/mem_churn.log
  (cd examples && timeout 300 $GD profile -o $W/runs/jax_train --trace-start 5 --trace-steps 3 -- python3 jax_marked_steps.py --steps 20) > $L/jax_train.log 2>&1; echo "rc=$?"; tail -2 $L/jax_train.log
  (cd examples && timeout 300 $GD profile -o $W/runs/torchrun_mlp -- torchrun --nproc-per-node 1 train_mlp.py --steps 30) > $L/torchrun.log 2>&1; echo "rc=$?"; tail -2 $L/torchrun.log
  start=$SECONDS
  (cd examples && timeout 300 $GD profile --ncu -o $W/runs/ncu_mlp -- python3 train_mlp.py --steps 30) > $L/ncu_mlp.log 2>&1; echo "rc=$? ncu wall_s=$((SECONDS-start))"; tail -4 $L/ncu_mlp.log
  find $W/runs -name 'report.ncu-rep' -size +40M -print -delete
fi

if want repeat; then
  log "repeat run folders (diff noise)"
  mkdir -p $R/runs
  for name in repeat_a repeat_b; do
    (cd examples && timeout -k 5 120 $GD profile -o $R/runs/$name --trace-start 4 --trace-steps 3 -- python3 sync_free.py --steps ${REPEAT_STEPS:-60}) > $L/$name.log 2>&1
    echo "$name rc=$?"; tail -2 $L/$name.log
  done
  timeout -k 5 120 $GD diff $R/runs/repeat_a $R/runs/repeat_b > $L/diff_repeat.log 2>&1; echo "diff rc=$?"; head -30 $L/diff_repeat.log
fi

if want losses; then
  log "bit-identical losses with and without light mode"
  (cd examples && timeout -k 5 60 python3 train_mlp.py --steps 40 --seed 3 > $L/losses_plain.txt 2>&1)
  (cd examples && timeout -k 5 90 $GD profile -o $R/runs_identical -- python3 train_mlp.py --steps 40 --seed 3 > $L/losses_light.txt 2>&1)
  grep '^step' $L/losses_plain.txt > $L/losses_a; grep '^step' $L/losses_light.txt > $L/losses_b
  if cmp -s $L/losses_a $L/losses_b; then echo "losses identical ($(wc -l < $L/losses_a) steps)"; else echo "LOSSES DIFFER"; diff $L/losses_a $L/losses_b | head; fi
fi

if want ncu_runs; then
  log "--ncu run folders with gpudiag's default sections"
  mkdir -p $R/runs
  timeout -k 5 60 $GD profile --ncu --launch-skip 0 --launch-count 40 --no-nvml -o $R/runs/ncu_kinds -- python3 examples/ncu_kernel_kinds.py > $L/kinds.log 2>&1; echo "kinds rc=$?"
  grep -c Profiling $R/runs/ncu_kinds/ncu/ncu.log; grep -o "[0-9]* passes" $R/runs/ncu_kinds/ncu/ncu.log | sort | uniq -c
  timeout -k 5 100 $GD profile --ncu --ncu-step 3 -o $R/runs/ncu_churn -- python3 examples/mem_churn.py /tmp/churn_own --steps 8 > $L/churn.log 2>&1; echo "churn rc=$?"
  rm -f $R/runs/ncu_kinds/ncu/report.ncu-rep $R/runs/ncu_churn/ncu/report.ncu-rep
fi

if want runs18; then
  log "issue 18's examples under light mode"
  mkdir -p $R/runs18
  for spec in "input_bound --steps 60" "epoch_stall --epochs 5 --batches-per-epoch 20" "sync_heavy --steps 60"; do
    set -- $spec; name=$1; shift
    s=$SECONDS
    timeout -k 10 120 $GD profile -o $R/runs18/$name -- python3 examples/$name.py "$@" --device cuda > $L/$name.log 2>&1
    echo "$name rc=$? wall=$((SECONDS - s)) s"; grep gpudiag $L/$name.log | tail -2
    timeout 120 $GD report $R/runs18/$name --no-html --json $R/runs18/$name.findings.json > $L/$name.report.log 2>&1
    python3 -c "
import json, sys; d = json.load(open(sys.argv[1]))
print([(f['id'], f['severity'], f['title'][:150]) for f in d['findings']][:6])" $R/runs18/$name.findings.json
  done
fi

if want input_generator; then
  log "examples/input_generator.py under light mode"
  mkdir -p $R/runs18
  timeout -k 5 80 $GD profile -o $R/runs18/input_generator -- python3 examples/input_generator.py --steps 40 --device cuda > $L/input_generator.log 2>&1
  echo "rc=$?"; grep gpudiag $L/input_generator.log | tail -3
fi

finish
