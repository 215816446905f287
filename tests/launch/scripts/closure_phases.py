"""Hand-made test script: a CPU training loop whose optimizer step takes a closure, as Lightning's loop and LBFGS do
(argv: steps).

The closure runs the forward (a 5 ms sleep inside the model) and the backward (a 20 ms sleep inside a custom autograd
function's backward); the optimizer's own update sleeps 10 ms before calling the closure. Light mode's step records
must put the backward in backward_ms once, and only the update in optimizer_ms."""

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
        time.sleep(0.010)
        return super().step(closure)


model = Model()
optimizer = SlowSGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 16), torch.randn(32, 1)


def closure():
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


for _ in range(int(sys.argv[1])):
    optimizer.step(closure=closure)
print("done", flush=True)
