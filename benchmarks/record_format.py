"""What formatting one record costs the runtime, per record kind (parsers/run_records.py).

Why: the runtime writes a step record for every training step, and a work or sync record per checkpoint, evaluation,
compile or synchronizing call in the trace window. The step record has its own %-format (``step_line``) because the
general formatter (``format_record``: the kind's field check, then the JSON encoder) costs several times more; this
measures both on the host's Python, where the cost lies (no GPU involved), and checks that they write the same
record.

How: timeit, the best of ``--rounds`` rounds of ``--calls`` calls each, one record kind after another.

    PYTHONPATH=$PWD python3 benchmarks/record_format.py
"""

from __future__ import annotations

import argparse
import json
import timeit

from parsers import run_records as rr

T_NS = 1796239003581976984
STACK = ["/abs/train.py:88 train", "/abs/main.py:3 <module>"]
STEP = dict(
    rank=3,
    step=12345,
    t_start_ns=T_NS,
    host_ms=1.764512,
    gpu_ms=1.760001,
    source="optimizer",
    instrumented=False,
    overhead_us=21.437,
)
CASES = {
    "step, step_line (the runtime's)": lambda: rr.step_line(*STEP.values()),
    "step, step_line with input_ms": lambda: rr.step_line(*STEP.values(), 41.123456, rr.INPUT_FROM_LOOP),
    "step, format_record": lambda: rr.format_record(rr.STEP, **STEP),
    "work, format_record": lambda: rr.format_record(
        rr.WORK, what=rr.WORK_CHECKPOINT, rank=0, step=12, t_ns=T_NS, ms=812.25, location="/abs/train.py:88"
    ),
    "sync, format_record": lambda: rr.format_record(
        rr.SYNC,
        rank=0,
        step=12,
        t_ns=T_NS,
        dur_ns=1200,
        op="aten::item",
        file="/abs/train.py",
        line=88,
        function="train",
        stack=STACK,
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    fast, general = json.loads(CASES["step, step_line (the runtime's)"]()), json.loads(CASES["step, format_record"]())
    assert list(fast.items()) == list(general.items()), (fast, general)
    for name, case in CASES.items():
        best_s = min(timeit.repeat(case, number=args.calls, repeat=args.rounds)) / args.calls
        print(f"{name:<34} {best_s * 1e6:6.3f} µs per record")


if __name__ == "__main__":
    main()
