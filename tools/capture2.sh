#!/usr/bin/env bash
# Capture 2 on the GPU machine: `gpudiag profile` run folders (fixtures), tests/gpu, the light-mode
# overhead benchmark, a healthy matmul ncu capture, the sweep, and bit-identical losses.
# Usage: OUT=/dir bash tools/capture2.sh
set -u
OUT=${OUT:?set OUT}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
W=/tmp/cap2; rm -rf $W; mkdir -p $W/runs $W/ncu $W/logs
log() { echo "[$(date +%T)] $*"; }
GD="python3 -m diagnose"

PHASE=${PHASE:-AB}
if [[ $PHASE == *A* ]]; then
log "matmul sizes"
for n in 2048 4096; do
  $NCU --clock-control none --target-processes all --profile-from-start off --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --metrics lts__t_sector_op_read_hit_rate.pct,lts__t_sector_op_write_hit_rate.pct --import-source no \
    -f -o $W/ncu/matmul_$n python3 examples/ncu_matmul_tiled.py $n > $W/ncu/matmul_$n.log 2>&1
  $NCU --import $W/ncu/matmul_$n.ncu-rep --csv --page raw > $W/ncu/matmul_${n}_raw.csv
  $NCU --import $W/ncu/matmul_$n.ncu-rep --csv --page raw --print-units base > $W/ncu/matmul_${n}_raw_base.csv
  $NCU --import $W/ncu/matmul_$n.ncu-rep --csv --page details > $W/ncu/matmul_${n}_details.csv
  gzip -9 -k $W/ncu/matmul_$n.ncu-rep
  python3 -c "
from parsers.ncu import read_ncu; d=read_ncu('$W/ncu/matmul_${n}_raw.csv')
print('matmul $n', d[['kernel_short','grid_size','dur_ns','l2_hit_pct','sm_throughput_pct']].to_string())"
done

log "light-mode run folders"
(cd examples && timeout 300 $GD profile -o $W/runs/sync_planted --trace-start 4 --trace-steps 3 -- python3 sync_planted.py) > $W/logs/sync_planted.log 2>&1; echo "rc=$?"; tail -3 $W/logs/sync_planted.log
(cd examples && timeout 300 $GD profile -o $W/runs/sync_free --trace-start 4 --trace-steps 3 -- python3 sync_free.py) > $W/logs/sync_free.log 2>&1; echo "rc=$?"; tail -2 $W/logs/sync_free.log
(cd examples && timeout 300 $GD profile -o $W/runs/mem_churn --trace-start 10 --trace-steps 2 --snapshot-at exit -- python3 mem_churn.py /tmp/cap2/mem_churn_own) > $W/logs/mem_churn.log 2>&1; echo "rc=$?"; tail -2 $W/logs/mem_churn.log
(cd examples && timeout 300 $GD profile -o $W/runs/jax_train --trace-start 5 --trace-steps 3 -- python3 train_jax.py --steps 20) > $W/logs/jax_train.log 2>&1; echo "rc=$?"; tail -2 $W/logs/jax_train.log
(cd examples && timeout 300 $GD profile -o $W/runs/torchrun_mlp -- torchrun --nproc-per-node 1 train_mlp.py --steps 30) > $W/logs/torchrun.log 2>&1; echo "rc=$?"; tail -2 $W/logs/torchrun.log
start=$SECONDS
(cd examples && timeout 300 $GD profile --ncu -o $W/runs/ncu_mlp -- python3 train_mlp.py --steps 30) > $W/logs/ncu_mlp.log 2>&1; echo "rc=$? ncu wall_s=$((SECONDS-start))"; tail -4 $W/logs/ncu_mlp.log
for r in $W/runs/*; do
  timeout 300 $GD report $r -o $r/report.html --json $r/findings.json > $W/logs/report_$(basename $r).log 2>&1
  echo "report $(basename $r) rc=$?"; head -12 $W/logs/report_$(basename $r).log
done

log "bit-identical losses with and without light mode"
(cd examples && python3 train_mlp.py --steps 40 --seed 3 > $W/logs/losses_plain.txt 2>&1)
(cd examples && $GD profile -o $W/runs_identical -- python3 train_mlp.py --steps 40 --seed 3 > $W/logs/losses_light.txt 2>&1)
grep '^step' $W/logs/losses_plain.txt > $W/logs/a; grep '^step' $W/logs/losses_light.txt > $W/logs/b
if cmp -s $W/logs/a $W/logs/b; then echo "losses identical ($(wc -l < $W/logs/a) steps)"; else echo "LOSSES DIFFER"; diff $W/logs/a $W/logs/b | head; fi

fi
if [[ $PHASE == *B* ]]; then
log "tests/gpu"
timeout 420 python3 -m pytest tests/gpu -m gpu -s -q -p no:cacheprovider > $W/logs/tests_gpu.log 2>&1; echo "tests/gpu rc=$?"; tail -25 $W/logs/tests_gpu.log

log "light overhead benchmark"
timeout 300 python3 benchmarks/light_overhead.py > $W/logs/light_overhead.log 2>&1; echo "rc=$?"; tail -15 $W/logs/light_overhead.log

if [ -f diagnose/commands/sweep.py ]; then
  log "sweep"
  timeout 400 $GD sweep -o $W/sweep --grid accum=1,2,4,8 --grid precision=fp32,bf16,fp16 -- python3 examples/train_sweep.py --grad-accum {accum} --precision {precision} > $W/logs/sweep.log 2>&1; echo "sweep rc=$?"; tail -20 $W/logs/sweep.log
fi

fi
log "pack"
cd $W
rm -f ncu/*.ncu-rep
find runs runs_identical -name '*.html' -delete
du -sh runs/* runs_identical sweep 2>/dev/null
find runs -name 'report.ncu-rep' -size +40M -print -delete
[ -d runs_identical ] && tar czf $OUT/runs.tar.gz --exclude=runs/ncu_mlp runs runs_identical
[ -d runs/ncu_mlp ] && tar czf $OUT/ncu2.tar.gz ncu runs/ncu_mlp
tar czf $OUT/logs.tar.gz logs $( [ -d sweep ] && echo sweep )
ls -la $OUT
log "done"
