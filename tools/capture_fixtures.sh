#!/usr/bin/env bash
# Capture the raw fixtures on a GPU machine (the device tool's H200), writing under $OUT.
# Usage (on the GPU machine, repo root): OUT=/some/dir bash tools/capture_fixtures.sh
# What each capture is for: fixtures/*/PROVENANCE.md.
set -u
OUT=${OUT:?set OUT}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
W=/tmp/capture; rm -rf $W; mkdir -p $W/ncu $W/memory $W/trace $W/info
export PYTHONUNBUFFERED=1
log() { echo "[$(date +%T)] $*"; }
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $NCU --version | tail -1
  python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
  python3 -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__)" 2>/dev/null
  python3 -c "import torch; p=torch.cuda.get_device_properties(0); print('sms', p.multi_processor_count, 'l2', getattr(p,'L2_cache_size',None))"
} > $W/info/versions.txt 2>&1
cat $W/info/versions.txt

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
  $NCU --import $W/ncu/$ex.ncu-rep --csv --page details --print-rule-details no > $W/ncu/${ex}_details_norules.csv 2>/dev/null || true
  ls -la $W/ncu/$ex.ncu-rep
done
log "ncu stdout, two processes"
$NCU --clock-control none --target-processes all --profile-from-start off --csv --page raw \
     --metrics gpu__time_duration.sum,lts__t_sector_hit_rate.pct,launch__grid_size,launch__block_size,sm__warps_active.avg.pct_of_peak_sustained_active \
     sh -c "python3 examples/ncu_small_grid.py; python3 examples/ncu_tiny_kernels.py" > $W/ncu/two_process_stdout.csv 2>&1
log "ncu done"

log "memory"
(cd examples && python3 mem_churn.py $W/memory/churn) 2>&1 | tail -2
(cd examples && PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 mem_churn.py $W/memory/expandable) 2>&1 | tail -2
(cd examples && python3 mem_churn.py $W/memory/ring --max-entries 3000) 2>&1 | tail -2
(cd examples && python3 mem_oom.py $W/memory/oom) 2>&1 | tail -2

log "trace + nvml"
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
python3 examples/sync_planted.py $W/trace/sync_planted 2>&1 | tail -2
python3 examples/sync_free.py $W/trace/sync_free 2>&1 | tail -2
log "jax"
python3 examples/jax_train.py $W/trace/jax 2>&1 | tail -3
kill $NVML_PID 2>/dev/null
find $W/trace/jax -type f | head; 
log "pack"
cd $W
du -sh ncu memory trace
tar czf $OUT/ncu_csv.tar.gz ncu/*.csv ncu/*.log info
tar czf $OUT/memory.tar.gz memory
tar czf $OUT/trace.tar.gz trace
for ex in ncu_small_grid ncu_matmul_tiled ncu_l2_random_gather ncu_tiny_kernels; do
  gzip -9 -c ncu/$ex.ncu-rep > $OUT/$ex.ncu-rep.gz
  s=$(stat -c %s $OUT/$ex.ncu-rep.gz); echo "$ex.ncu-rep.gz $s"
  [ $s -gt 9000000 ] && rm $OUT/$ex.ncu-rep.gz && echo "dropped $ex (too big)"
done
ls -la $OUT
log "all done"
