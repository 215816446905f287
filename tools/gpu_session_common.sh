# Sourced by the tools/gpu_session_*.sh device scripts: the carried wheels installed, the paths, $R (results,
# tarred into $OUT/results.tgz at the end) and $L (logs), log() and left() (seconds left of $TOTAL_S).
set -u
OUT=${OUT:?set OUT}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
R=/tmp/results; L=$R/logs; mkdir -p $L; T0=$SECONDS
log() { echo "[$(date +%T)] $*"; }
left() { echo $(( ${TOTAL_S:-560} - (SECONDS - T0) )); }
{ date; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv; ncu --version | tail -1; nproc
  python3 -c "import torch, jax; print('python', __import__('sys').version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'jax', jax.__version__)"
} > $R/versions.txt 2>&1
cat $R/versions.txt
