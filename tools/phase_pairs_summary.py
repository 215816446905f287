"""Issue 31 (a): gpudiag's host phases against the hand clock, pair by pair and as medians over the pairs.

    python tools/phase_pairs_summary.py RESULTS_DIR

RESULTS_DIR holds alt<i>/ (run folders of examples/char_gpt.py under light mode) and alt<i>_phases.json (the
same script's plain run with --phase-clock-out), as tools/gpu_phase_pairs.sh writes them. The hand's phases are the
medians of steps 5 on; gpudiag's are the budget's ``host_phases`` of the median untraced step. gpudiag's forward is
the model's call. Hand clocks from 2026-12-06 on time the loss and zero_grad as phases of their own, so gpudiag's
rest is compared with the hand's batch, loss and zero_grad; older ones (forward with the loss, backward with
zero_grad) get the old rows, "forward and the rest" against the hand's batch and forward. The batch's copy to the
device waits for the GPU in the light run, where the hand's synchronize put that wait in the phase before: that is in
gpudiag's rest and not in the hand's."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import diagnose

OLD_ROWS = (  # hand clocks before 2026-12-06: the forward with the loss, zero_grad with the backward
    ("backward", lambda p: p["backward_ms"], lambda h: h["backward"]),
    ("optimizer", lambda p: p["optimizer_ms"], lambda h: h["optimizer"]),
    ("forward", lambda p: p.get("forward_ms", float("nan")), lambda h: h["forward"]),
    (
        "forward and the rest",
        lambda p: p.get("forward_ms", 0.0) + p.get("rest_ms", p.get("forward_and_rest_ms", 0.0)),
        lambda h: h["batch"] + h["forward"],
    ),
)
ROWS = (  # the loss and zero_grad timed apart: each gpudiag phase against the hand's phases it holds
    ("backward", lambda p: p["backward_ms"], lambda h: h["backward"]),
    ("optimizer", lambda p: p["optimizer_ms"], lambda h: h["optimizer"]),
    ("forward", lambda p: p.get("forward_ms", float("nan")), lambda h: h["forward"]),
    ("rest", lambda p: p.get("rest_ms", float("nan")), lambda h: h["batch"] + h["loss"] + h["zero_grad"]),
    (
        "input + rest",
        lambda p: p.get("rest_ms", 0.0) + p.get("input_ms", 0.0),
        lambda h: h["batch"] + h["loss"] + h["zero_grad"],
    ),
)


def main(results: Path) -> int:
    pairs = []
    for clock_path in sorted(results.glob("alt*_phases.json")):
        run = results / clock_path.name.replace("_phases.json", "")
        if not run.is_dir():
            print(f"{run.name}: no light run")
            continue
        analysis = diagnose.analyze(diagnose.load(run, quiet=True))
        phases = analysis.results["step_budget"].meta["ranks"][0]["host_phases"]
        clock = json.loads(clock_path.read_text())["phase_ms"]
        hand = {k: statistics.median(v[5:]) for k, v in clock.items()}
        pairs.append((run.name, phases, hand))
    if not pairs:
        print("no pairs")
        return 1
    print(f"{'phase':<22}" + "".join(f"{name:>20}" for name, _, _ in pairs) + f"{'median':>20}")
    rows = ROWS if all("zero_grad" in h for _, _, h in pairs) else OLD_ROWS
    for label, of_light, of_hand in rows:
        cells = [
            f"{of_light(p):7.2f}/{of_hand(h):5.2f} {100 * (of_light(p) / of_hand(h) - 1):+4.0f}%" for _, p, h in pairs
        ]
        light = statistics.median(of_light(p) for _, p, _ in pairs)
        hand = statistics.median(of_hand(h) for _, _, h in pairs)
        print(
            f"{label:<22}"
            + "".join(f"{c:>20}" for c in cells)
            + f"{light:8.2f}/{hand:5.2f} {100 * (light / hand - 1):+4.0f}%"
        )
    print("cells: gpudiag ms / hand ms and the difference; the median column is over the pairs")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
