"""An evaluation every 5 steps that ends the way Lightning 2.6's evaluation loop ends it: each submodule's
``training`` attribute set back directly (its _ModuleMode.restore), never a train() call. Training items take 5 ms
each (batches of 4: 20 ms of input wait a step), evaluation items 30 ms."""

import torch
from slow_items import Items  # beside this script
from torch.utils.data import DataLoader

model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
train = DataLoader(Items(64, 0.005), batch_size=4)
evaluate = DataLoader(Items(8, 0.03), batch_size=8)
for step, x in enumerate(train):
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
    if step % 5 == 4:
        modes = {name: m.training for name, m in model.named_modules()}
        model.eval()  # EVALUATION
        with torch.no_grad():
            for y in evaluate:
                model(y)
        for name, m in model.named_modules():  # restored as Lightning does: no train() call
            m.training = modes[name]
print("done")
