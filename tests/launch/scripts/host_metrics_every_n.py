"""A torch loop (CPU) that computes a metric on the host every 15 steps, with no hook gpudiag knows: no
model.eval(), no torch.save. The metric is plain Python over the model's outputs (HOST-METRIC), called at the
line marked LOOP-CALL. long_step_code should name host_metric() and that line."""

import time

import torch

model = torch.nn.Linear(32, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 32), torch.randn(64, 4)


def host_metric(outputs):  # HOST-METRIC: Python over every value, about 0.25 s
    deadline = time.perf_counter() + 0.25
    total = 0.0
    while time.perf_counter() < deadline:
        for value in outputs.flatten().tolist():
            total += value * value
    return total


for step in range(61):
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 15 == 14:
        print("metric", host_metric(model(x).detach()))  # LOOP-CALL
