"""A torch loop (CPU) on one core that other processes share now and then, as on a loaded host: BURNERS busy loops,
pinned to the same core, spin for BURST_S in every second (from QUIET_S on, when the loop's ordinary steps are
known) and sleep the rest; the loop runs at nice 19. The steps in a burst run many times slower in the step's own
code (train_step, called at LOOP-LINE), doing no more work. The long-step sampler records those steps; the report
must not name the step's own code as work that makes them slow."""

import os
import signal
import time

import torch

BURNERS, BURST_S, SECONDS, QUIET_S = 2, 0.35, 7.0, 2.5
CORE = min(os.sched_getaffinity(0))
os.sched_setaffinity(0, {CORE})
torch.set_num_threads(1)


def burn(start: float, until: float) -> None:
    time.sleep(max(0.0, start - time.monotonic()))
    while time.monotonic() < until:
        phase = time.monotonic() % 1.0
        if phase < BURST_S:
            while time.monotonic() % 1.0 < BURST_S and time.monotonic() < until:
                pass
        else:
            time.sleep(1.0 - phase)


end = time.monotonic() + SECONDS
burners = []
for _ in range(BURNERS):
    pid = os.fork()
    if pid == 0:  # a burner: never returns to the loop, never runs exit hooks
        try:
            burn(time.monotonic() + QUIET_S, end)
        finally:
            os._exit(0)
    burners.append(pid)
os.nice(19)  # the loop yields its core to the burners while they spin, as to a busier neighbour

model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU()) for _ in range(4)])
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 128), torch.randn(64, 128)


def train_step():
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


while time.monotonic() < end:
    train_step()  # LOOP-LINE
for pid in burners:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
