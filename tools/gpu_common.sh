# Sourced by the device scripts (tools/gpu_capture_fixtures.sh, tools/gpu_run_tests.sh, tools/gpu_overhead.sh,
# tools/gpu_phase_pairs.sh), run
# from the repo root on the GPU machine: the carried wheels installed (.whl/, when the call carries one), gpudiag
# from the checkout on PYTHONPATH, $R (results, tarred into $OUT/results.tgz by finish), $L (its logs), $NCU, $GD
# (gpudiag), log(), left() (seconds left of $TOTAL_S), want PART (whether $PARTS names PART), and $R/versions.txt.
# Every log goes straight to a file (no pipes: a killed run must not leave a reader waiting).
set -u
OUT=${OUT:?set OUT}
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | tail -2
fi
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
GD="python3 -m diagnose"
R=/tmp/results; L=$R/logs; rm -rf $R; mkdir -p $L; T0=$SECONDS
log() { echo "[$(date +%T)] $*"; }
left() { echo $(( ${TOTAL_S:-560} - (SECONDS - T0) )); }
want() { [[ " $PARTS " == *" $1 "* ]]; }
finish() { tar -czf $OUT/results.tgz -C /tmp results; ls -la $OUT; log done; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv; $NCU --version | tail -1; nproc
  python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
  python3 -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__)" 2>/dev/null
  python3 -c "import cupy; print('cupy', cupy.__version__)" 2>/dev/null
  python3 -c "import torch; p=torch.cuda.get_device_properties(0); print('sms', p.multi_processor_count, 'l2', getattr(p,'L2_cache_size',None))"
} > $R/versions.txt 2>&1
cat $R/versions.txt
