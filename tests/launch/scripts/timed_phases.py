"""Hand-made test script: a CPU training loop whose phases take known host time (argv: steps [closure|by_hand]).

Each iteration's forward sleeps 5 ms inside the model, the loss's backward sleeps 20 ms inside a custom autograd
function's backward, and the optimizer (SGD with a sleeping step) sleeps 30 ms; nothing else sleeps. Light mode's
step records must put at least those times in backward_ms and optimizer_ms, and the rest in the step's host time.
With ``closure``, the forward, the loss and the backward run in a closure given to ``optimizer.step``, as in
Lightning's loop and LBFGS: the optimizer phase must still hold the update alone. With ``by_hand``, no optimizer:
the parameters are updated in place by hand (``p -= lr * p.grad``) after the same 30 ms sleep, as in teaching and
research loops: there is no optimizer phase, and the update's time is in the rest."""

import sys
import time

import torch


class SlowBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        time.sleep(0.020)
        return grad


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 1)

    def forward(self, x):
        time.sleep(0.005)
        return SlowBackward.apply(self.linear(x))


class SlowSGD(torch.optim.SGD):
    def step(self, closure=None):
        time.sleep(0.030)
        return super().step(closure)


model = Model()
optimizer = None if sys.argv[2:] == ["by_hand"] else SlowSGD(model.parameters(), lr=0.01)  # by hand: none made
x, y = torch.randn(32, 16), torch.randn(32, 1)


def closure():
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


def update_by_hand(lr=0.01):
    time.sleep(0.030)
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
            p.grad = None


for _ in range(int(sys.argv[1])):
    if sys.argv[2:] == ["by_hand"]:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        update_by_hand()
        continue
    if sys.argv[2:] == ["closure"]:
        optimizer.step(closure=closure)
        continue
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("done", flush=True)
