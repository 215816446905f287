#!/usr/bin/env bash
# One device call (nvidia-h200) for issue 20. Usage: OUT=/dir bash tools/gpu_session_issue20.sh
#   1. gpudiag profile --ncu (default sections) of examples/ncu_kernel_kinds.py, launch window: the fixture
#      fixtures/ncu/kernel_kinds/report.ncu-rep.gz captured by gpudiag's own --ncu defaults
#   2. gpudiag profile --ncu --ncu-step 3 of examples/mem_churn.py: the allocator history and the launch starts
#      under ncu, for the L2 x allocator timeline (fixtures/runs/ncu_churn)
#   3. tests/gpu on this tree
# Every log goes straight to a file under $OUT (no pipes: a killed run must not leave a reader waiting).
set -u
OUT=${OUT:?set OUT}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L $OUT/runs; T0=$SECONDS
log() { echo "[$(date +%T)] $*"; }
{ date; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; ncu --version | tail -1
  python3 -c "import torch, cupy; print('python', __import__('sys').version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cupy', cupy.__version__)"
} > $OUT/versions.txt 2>&1
cat $OUT/versions.txt

log "1. --ncu default sections: kernel kinds"
timeout -k 10 200 python3 -m diagnose profile --ncu --launch-skip 0 --launch-count 40 --no-nvml -o $OUT/runs/ncu_kinds \
  -- python3 examples/ncu_kernel_kinds.py > $L/ncu_kinds.log 2>&1
echo "rc=$?"; tail -5 $L/ncu_kinds.log; ls -la $OUT/runs/ncu_kinds/ncu
python3 -m diagnose report $OUT/runs/ncu_kinds --no-html --json $OUT/runs/ncu_kinds_findings.json > $L/report_kinds.log 2>&1
echo "report rc=$?"; head -20 $L/report_kinds.log

log "2. --ncu on mem_churn, step 3: history + launch starts"
timeout -k 10 200 python3 -m diagnose profile --ncu --ncu-step 3 -o $OUT/runs/ncu_churn \
  -- python3 examples/mem_churn.py /tmp/churn_own --steps 8 > $L/ncu_churn.log 2>&1
echo "rc=$?"; tail -5 $L/ncu_churn.log; ls -la $OUT/runs/ncu_churn $OUT/runs/ncu_churn/ncu $OUT/runs/ncu_churn/memory
python3 -m diagnose report $OUT/runs/ncu_churn -o $OUT/runs/ncu_churn_report.html --json $OUT/runs/ncu_churn_findings.json > $L/report_churn.log 2>&1
echo "report rc=$?"; head -20 $L/report_churn.log

left=$(( ${TOTAL_S:-560} - (SECONDS - T0) )); log "3. tests/gpu with ${left} s"
timeout -k 10 $left python3 -m pytest tests/gpu -m gpu -s -q -p no:cacheprovider > $L/tests_gpu.log 2>&1
echo "tests/gpu rc=$?"; grep -E "summary row|passed|failed|Error|assert" $L/tests_gpu.log | tail -30
log done
