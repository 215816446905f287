"""Hand-made test script: a seeded CPU torch training that writes its own results into the cwd.

Writes losses.txt (one repr() per step) and checkpoint.pt (torch.save of the model) in the
current folder, so tests can compare them byte for byte with and without gpudiag.
argv: STEPS [--exit-code N] [--kill-in-trace-export]. --kill-in-trace-export patches
gzip.GzipFile.write (which gpudiag's trace export uses; this script uses no gzip itself) to
write half of its first chunk and SIGKILL the process: a kill in the middle of writing the trace.
"""

import argparse
import gzip
import os
import signal

import torch

p = argparse.ArgumentParser()
p.add_argument("steps", type=int)
p.add_argument("--exit-code", type=int, default=0)
p.add_argument("--kill-in-trace-export", action="store_true")
args = p.parse_args()

if args.kill_in_trace_export:
    _write = gzip.GzipFile.write

    def _write_half_and_die(self, data):
        _write(self, bytes(data)[: len(data) // 2])
        self.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    gzip.GzipFile.write = _write_half_and_die

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))
with open("losses.txt", "w") as f:
    for step in range(args.steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        f.write(f"{step} {loss.item()!r}\n")
torch.save(model.state_dict(), "checkpoint.pt")
print(f"done {args.steps} steps", flush=True)
raise SystemExit(args.exit_code)
