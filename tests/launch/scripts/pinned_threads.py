"""A torch loop (CPU) whose process may run on one CPU only (its affinity, as under ``taskset -c 0``) while a thread
of its own multiplies matrices (torch releases the GIL inside): the host may have CPUs to spare, but the loop and
that thread take turns on the one they are given, so the loop waits on the run queue."""

import os
import threading
import time

import torch

os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
torch.set_num_threads(1)
SECONDS = 3.0
stop = threading.Event()


def prepare() -> None:  # a background thread of the script's: batch augmentation, say
    a = torch.randn(256, 256)
    while not stop.is_set():
        a = torch.tanh(a @ a) * 0.5


worker = threading.Thread(target=prepare, daemon=True)
worker.start()
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randn(32, 1)
end = time.monotonic() + SECONDS
while time.monotonic() < end:
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
stop.set()
worker.join()
