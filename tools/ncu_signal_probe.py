"""Does a Python script under ncu run its own signal handler? (a diagnostic for --after-window stop, not a test)

On an H100 (2026-12-06) every ``gpudiag profile --ncu`` run that --after-window stop ended lost the end of its
step log and its allocator snapshot ("incomplete: events/rank0.jsonl"), though the runtime's SIGTERM handler
flushes them: the same stop with the CPU tests' fake ncu flushes. This sends each signal in ``--signals`` the way
ncu_mode.NcuStopper does (to every process of ncu's group but ncu) to a small CUDA script, under ncu and without
it, and prints per run what the script saw: its Python handler ran or not, atexit ran or not, its exit status as
ncu reports it, and which processes of the group got the signal.

    PYTHONPATH=$PWD python3 tools/ncu_signal_probe.py [--signals TERM,USR1,RTMIN+8] [--no-plain]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from diagnose.launch.supervisor import group_members  # noqa: E402


def app_source() -> str:
    return """
import atexit, os, signal, sys, time
import torch
out, names = sys.argv[1], sys.argv[2].split(",")
def note(text):
    with open(out, "a") as f:
        f.write(text + "\\n")
def handler(signum, frame):
    note(f"handler {signum}")
    raise SystemExit(40)
def number(name):
    if name.startswith("RTMIN+"):
        return signal.SIGRTMIN + int(name[6:])
    return getattr(signal, "SIG" + name)
for name in names:
    signal.signal(number(name), handler)
atexit.register(lambda: note("atexit"))
a = torch.randn(256, 256, device="cuda")
torch.cuda.synchronize()
note("ready")
while True:
    a = torch.tanh(a @ a.T / 256)
    torch.cuda.synchronize()
    time.sleep(0.01)
"""


def number(name: str) -> int:
    if name.startswith("RTMIN+"):
        return signal.SIGRTMIN + int(name[6:])
    return getattr(signal, "SIG" + name)


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def one_run(ncu: str | None, name: str, app: Path, folder: Path, handled: str) -> str:
    out = folder / f"{'ncu' if ncu else 'plain'}_{name.replace('+', '')}.txt"
    command = [sys.executable, str(app), str(out), handled]
    if ncu:
        command = [
            ncu,
            "--clock-control",
            "none",
            "--launch-count",
            "1",
            "-o",
            str(out.with_suffix("")),
            "-f",
        ] + command
    started = time.monotonic()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    while time.monotonic() - started < 120 and child.poll() is None:
        if out.exists() and "ready" in out.read_text():
            break
        time.sleep(0.1)
    time.sleep(1.0)
    signalled = []
    for pid in group_members(child.pid):
        if pid != child.pid or not ncu:
            signalled.append(f"{pid}:{comm(pid)}")
            try:
                os.kill(pid, number(name))
            except ProcessLookupError:
                pass
    try:
        _, err = child.communicate(timeout=60)
        status = child.returncode
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        _, err = child.communicate()
        status = "hung (killed after 60 s)"
    seen = out.read_text().split("\n") if out.exists() else []
    tail = " | ".join(line for line in err.decode(errors="replace").splitlines()[-3:] if line.strip())
    return (
        f"{'ncu' if ncu else 'plain':5s} SIG{name:8s} exit={status} signalled={signalled} "
        f"saw={[s for s in seen if s]} stderr_tail={tail[:300]!r}"
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--signals", default="TERM,USR1,RTMIN+8")
    p.add_argument("--ncu", default=os.environ.get("NCU") or "ncu")
    p.add_argument("--no-plain", action="store_true", help="only the runs under ncu")
    args = p.parse_args(argv)
    names = args.signals.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        app = folder / "signal_app.py"
        app.write_text(app_source())
        for name in names:
            for ncu in ([None] if not args.no_plain else []) + [args.ncu]:
                print(one_run(ncu, name, app, folder, ",".join(names)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
