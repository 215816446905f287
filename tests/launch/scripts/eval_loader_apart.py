"""Training batches of 4 from one DataLoader, and every 5 steps an evaluation under model.eval() over a second
DataLoader whose items take 30 ms each, with batches of 8 (a new shape, were it the training loop's input)."""

import torch
from slow_items import Items  # beside this script
from torch.utils.data import DataLoader

model = torch.nn.Linear(16, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
train = DataLoader(Items(80, 0.0), batch_size=4)
evaluate = DataLoader(Items(8, 0.03), batch_size=8)
for step, x in enumerate(train):
    model(x).sum().backward()
    opt.step()
    opt.zero_grad()
    if step % 5 == 4:
        model.eval()  # EVALUATION
        with torch.no_grad():
            for y in evaluate:
                model(y)
        model.train()
print("done")
