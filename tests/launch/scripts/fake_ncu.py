#!/usr/bin/env python3
"""Hand-made stand-in for Nsight Compute's ncu, for CPU tests of the --ncu flow only.

It parses the options gpudiag passes, runs the application, writes ==PROF== lines to the
--log-file as ncu does, and writes a fake report. FAKE_NCU_MODE: ok | perm | none | launches-only (no
kernel under an --nvtx-include window, as ncu when no step range was ever opened; kernels under a launch
window). Each run appends its window to FAKE_NCU_RUNS_FILE when that is set.
`--import REPORT --csv ...` prints a two-line CSV.
"""

import os
import subprocess
import sys

VALUED = {
    "--target-processes",
    "--target-processes-filter",
    "--clock-control",
    "--section",
    "--set",
    "--replay-mode",
    "--import-source",
    "--nvtx-include",
    "--launch-count",
    "--launch-skip",
    "--kernel-name",
    "-o",
    "--log-file",
    "--metrics",
}
args = sys.argv[1:]
if args == ["--help"]:  # the lines of ncu 2025.3's help that gpudiag looks for
    print("  --target-processes-filter arg         Set the comma separated expressions to filter which processes ...")
    print("                                          exclude-tree:<process name> Set the exact process name to exclude")
    sys.exit(0)
if args and args[0] == "--import":
    print('"ID","Process ID","Kernel Name","gpu__time_duration.sum"')
    print('"","","","ns"')
    print('"0","1","fake_kernel","1000"')
    sys.exit(0)
opts, i = {}, 0
while i < len(args) and args[i].startswith("-"):
    if args[i] in VALUED:
        opts.setdefault(args[i], []).append(args[i + 1])
        i += 2
    else:
        opts.setdefault(args[i], []).append(True)
        i += 1
app = args[i:]
mode = os.environ.get("FAKE_NCU_MODE", "ok")
if mode == "launches-only":
    mode = "none" if "--nvtx-include" in opts else "ok"
if os.environ.get("FAKE_NCU_RUNS_FILE"):
    with open(os.environ["FAKE_NCU_RUNS_FILE"], "a") as runs:
        window = opts.get("--nvtx-include") or [
            "launches",
            *opts.get("--launch-skip", []),
            *opts.get("--launch-count", []),
        ]
        runs.write(f"{' '.join(window)} bootstrap-disabled={os.environ.get('GPUDIAG_DISABLE') == '1'}\n")
log = open(opts["--log-file"][0], "w")
log.write(f"==PROF== Connected to process {os.getpid()} ({sys.executable})\n")
log.flush()
rc = subprocess.call(app)
if mode == "perm":
    log.write(
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
        "Counters on the target device 0.\n"
    )
elif mode == "none":
    log.write("==WARNING== No kernels were profiled.\n")
else:
    for k in range(3):
        log.write(f'==PROF== Profiling "fake_kernel_{k}" - {k}: 0%....50%....100% - 11 passes\n')
    with open(opts["-o"][0] + ".ncu-rep", "wb") as f:
        f.write(b"NVR\x00fake report")
    log.write(f"==PROF== Report: {opts['-o'][0]}.ncu-rep\n")
log.write(f"==PROF== Disconnected from process {os.getpid()}\n")
log.close()
sys.exit(rc)
