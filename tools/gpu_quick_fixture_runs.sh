set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/plotly*.whl .whl/narwhals*.whl .whl/orjson*.whl .whl/packaging*.whl .whl/nvtx*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
W=/tmp/w; mkdir -p $W
timeout -k 5 60 python3 -m diagnose profile --ncu --launch-skip 0 --launch-count 40 --no-nvml -o $W/ncu_kinds -- python3 examples/ncu_kernel_kinds.py > $W/kinds.log 2>&1; echo "kinds rc=$?"
grep -c Profiling $W/ncu_kinds/ncu/ncu.log; grep -o "[0-9]* passes" $W/ncu_kinds/ncu/ncu.log | sort | uniq -c
timeout -k 5 100 python3 -m diagnose profile --ncu --ncu-step 3 -o $W/ncu_churn -- python3 examples/mem_churn.py /tmp/churn_own --steps 8 > $W/churn.log 2>&1; echo "churn rc=$?"
rm -f $W/ncu_kinds/ncu/report.ncu-rep $W/ncu_churn/ncu/report.ncu-rep
tar -C $W -czf $OUT/runs.tgz ncu_kinds ncu_churn kinds.log churn.log; ls -la $OUT
