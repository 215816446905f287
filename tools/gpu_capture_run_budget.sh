#!/usr/bin/env bash
# Capture issue 30's run-budget fixtures on the GPU machine (the device tool's H200), from the repo root:
#
#     OUT=/some/dir [PARTS="char_gpt char_gpt_compile loader_workers hf_trainer gan"] bash tools/gpu_capture_run_budget.sh
#
# Each part runs one example under `gpudiag profile` (light mode, defaults but no allocator history: the fixtures stay
# small) with the script's own stopwatch (--clock-out) beside its run folder, and once more without gpudiag when
# PLAIN=1 (the script's wall time alone). Results go to /tmp/results (tarred into $OUT/results.tgz): run folders
# <part>/, clocks <part>.clocks.json, wall clocks <part>.wall.json. tests/analyzers/test_run_budget_h200.py reads the
# copies kept in fixtures/runs/.
PARTS=${PARTS:-char_gpt char_gpt_compile loader_workers hf_trainer gan}
source tools/gpu_common.sh
profile() {  # profile PART TIMEOUT_S ARGS...: the example under gpudiag, its stopwatch and gpudiag's wall clock
  local part=$1 limit=$2; shift 2
  log "$part: $*"
  local t0=$(date +%s%N)
  timeout -k 10 $limit $GD profile -q -o $R/$part --history-entries 0 --no-nvml -- python3 "$@" \
    --clock-out $R/$part.clocks.json > $L/$part.log 2>&1
  local rc=$? t1=$(date +%s%N)
  echo "{\"start_ns\": $t0, \"end_ns\": $t1, \"rc\": $rc}" > $R/$part.wall.json
  echo "$part rc=$rc $(( (t1 - t0) / 1000000 )) ms"; tail -3 $L/$part.log
  $GD report $R/$part -q > $L/$part.report.txt 2>&1; head -12 $L/$part.report.txt | cut -c1-300
}
want char_gpt && profile char_gpt 200 examples/char_gpt.py --iters 600 --eval-interval 200
want char_gpt_compile && profile char_gpt_compile 300 examples/char_gpt.py --iters 300 --eval-interval 100 --compile
want loader_workers && profile loader_workers 200 examples/loader_workers.py --workers 4 --steps 240
want hf_trainer && profile hf_trainer 300 examples/hf_trainer_tiny.py --steps 300 --every 100
if want gan; then  # a trace the script captured itself (torch.profiler), read alone: no run folder
  log "gan: examples/gan_loader.py"
  timeout -k 10 200 python3 examples/gan_loader.py --workers 2 --iters 60 --trace-out $R/gan_loader.trace.json \
    > $L/gan.log 2>&1
  echo "gan rc=$?"; tail -2 $L/gan.log; gzip -f $R/gan_loader.trace.json
  $GD report $R/gan_loader.trace.json.gz -q > $L/gan.report.txt 2>&1; head -12 $L/gan.report.txt | cut -c1-300
fi
finish
