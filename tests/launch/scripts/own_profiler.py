"""Hand-made test script: a CPU training loop that profiles itself with torch.profiler (argv: steps mode out).

``scheduled``: the whole loop inside ``torch.profiler.profile(schedule=schedule(wait=4, warmup=1, active=3))``
with ``prof.step()`` each iteration, the way a script that profiles itself is written: the profiler is started from
the first step but traces only from step 5, after gpudiag's window would have opened. ``late``: the loop runs
plain, then from step 6 a ``with torch.profiler.profile()`` block traces three steps, while gpudiag's window (steps
4-9) is open. The script's trace goes to ``out``."""

import sys

import torch

steps, mode, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
model = torch.nn.Linear(32, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 32), torch.randn(64, 1)


def train_step():
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


if mode == "scheduled":
    schedule = torch.profiler.schedule(wait=4, warmup=1, active=3, repeat=1)
    with torch.profiler.profile(schedule=schedule, on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
        for _ in range(steps):
            train_step()
            prof.step()
else:
    for i in range(steps):
        if i == 6:
            with torch.profiler.profile() as prof:
                for _ in range(3):
                    train_step()
            prof.export_chrome_trace(out)
        train_step()
print("done", flush=True)
