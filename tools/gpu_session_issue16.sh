#!/usr/bin/env bash
# One device call (nvidia-h200) after the issue-16 refactor. Usage: OUT=/dir bash tools/gpu_session_issue16.sh
#   1. ncu --set full of examples/ncu_kernel_kinds.py (naive/tiled GEMM, streaming add, strided copy, naive
#      transpose): the real captures the kernel analyzers of issue 20 are to be tested on; exported as every CSV form
#   2. tests/gpu on this tree (the in-process runtime is now the diagnose/launch/runtime package)
# Every log goes straight to a file under $OUT (no pipes: a killed run must not leave a reader waiting).
set -u
OUT=${OUT:?set OUT}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L $OUT/kinds; T0=$SECONDS
log() { echo "[$(date +%T)] $*"; }
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
{ date; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $NCU --version | tail -1
  python3 -c "import torch, cupy; print('python', __import__('sys').version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'cupy', cupy.__version__)"
} > $OUT/kinds/versions.txt 2>&1
cat $OUT/kinds/versions.txt

log "ncu --set full: kernel kinds"
start=$SECONDS
timeout -k 10 ${NCU_S:-240} $NCU --clock-control none --set full --import-source yes -f -o $OUT/kinds/report \
  python3 examples/ncu_kernel_kinds.py > $OUT/kinds/ncu_console.log 2>&1
echo "ncu rc=$? wall_s=$((SECONDS - start))"; tail -4 $OUT/kinds/ncu_console.log
if [ -f $OUT/kinds/report.ncu-rep ]; then
  $NCU --import $OUT/kinds/report.ncu-rep --csv --page raw > $OUT/kinds/raw.csv 2>>$L/export.log
  $NCU --import $OUT/kinds/report.ncu-rep --csv --page raw --print-units base > $OUT/kinds/raw_base.csv 2>>$L/export.log
  $NCU --import $OUT/kinds/report.ncu-rep --csv --page details > $OUT/kinds/details.csv 2>>$L/export.log
  $NCU --import $OUT/kinds/report.ncu-rep --csv --page source --print-source sass,cuda > $OUT/kinds/source.csv 2>>$L/export.log
  python3 -m diagnose report $OUT/kinds/report.ncu-rep --no-html --json $OUT/kinds/findings.json > $L/report_kinds.log 2>&1
  echo "report rc=$?"; head -30 $L/report_kinds.log
  gzip -9 $OUT/kinds/report.ncu-rep
  ls -la $OUT/kinds
fi

left=$(( ${TOTAL_S:-560} - (SECONDS - T0) )); log "tests/gpu with ${left} s"
timeout -k 10 $left python3 -m pytest tests/gpu -m gpu -s -q -p no:cacheprovider > $L/tests_gpu.log 2>&1
echo "tests/gpu rc=$?"; grep -E "summary row|passed|failed|Error|assert" $L/tests_gpu.log | tail -30
log done
