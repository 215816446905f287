#!/usr/bin/env bash
# Device call (nvidia-h200) for issue 17, 2026-12-04 evening: why the JAX boundary's own time stays ~5 µs on the
# H200 host (1.4 µs on the 2-core CPU host): the clock's cost there, and the steady path's cost per call.
# Usage: OUT=/dir TOTAL_S=300 bash tools/gpu_session_issue17_g.sh
source tools/gpu_session_common.sh
log "1. clocks"
{ cat /sys/devices/system/clocksource/clocksource0/current_clocksource
  python3 -m timeit -s "import time" "time.perf_counter_ns()"
  python3 -m timeit -s "import time" "time.time_ns()"
  python3 -m timeit -s "import threading; l = threading.Lock()" "l.acquire(False); l.release()"
  python3 -m timeit "pass"; } > $L/clocks.log 2>&1
cat $L/clocks.log
log "2. the steady jit boundary per call, no dispatch (scratch-free: in-process)"
timeout 120 python3 - > $L/boundary_cost.log 2>&1 <<'PY'
import statistics, tempfile, time, jax, jax.numpy as jnp
import diagnose
from diagnose.launch.runtime import lifecycle
with tempfile.TemporaryDirectory() as work:
    with diagnose.profile(out=work + "/run", nvml=False, quiet=True):
        f = jax.jit(lambda a: a + 1)
        a = jnp.ones(3)
        for _ in range(100):
            f(a)
        steps = lifecycle.active().steps
        print("steady path engaged:", steps._steady)
        for label, call in (("on_jit_step", steps.on_jit_step), ("boundary(jit)", lambda: steps.boundary("jit"))):
            per = []
            for _ in range(20):
                t = time.perf_counter_ns()
                for _ in range(2000):
                    call()
                per.append((time.perf_counter_ns() - t) / 2000)
            print(f"{label}: median {statistics.median(per):.0f} ns per call over 20 x 2000 calls (drains included)")
PY
cat $L/boundary_cost.log
log "3. JAX interleaved overhead, width 1024"
timeout -k 10 110 python3 benchmarks/jax_light_overhead_interleaved.py --seconds 50 --width 1024 > $L/jax_interleaved_1024.log 2>&1
echo "rc=$?"; tail -7 $L/jax_interleaved_1024.log
tar -czf $OUT/results.tgz -C /tmp results
log done
