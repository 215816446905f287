"""Hand-made test script (tests/launch/test_run_budget_records.py): work before the first step boundary, which ends
at the first backward pass. A slow import, a torch.compile's first compile, a torch.save and an evaluation span, then
a DataLoader with 2 workers whose first batch is fetched before that boundary; two epochs (one loader: one record).
argv: a folder to write the checkpoint into."""

import os
import sys

import slow_import_module  # IMPORT-SLOW  # noqa: F401
import torch
from torch.utils.data import DataLoader, Dataset

out = sys.argv[1]


class Squares(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.full((4,), float(i)), torch.tensor(float(i * i))


model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
compiled = torch.compile(model, backend="eager", dynamic=False)
compiled(torch.ones(4, 4))  # COMPILE-BEFORE
torch.save(model.state_dict(), os.path.join(out, "init.pt"))  # SAVE-BEFORE
model.eval()  # EVAL-BEFORE
with torch.no_grad():
    model(torch.ones(2, 4))
model.train()
loader = DataLoader(Squares(), batch_size=4, num_workers=2, prefetch_factor=2)
for _epoch in range(2):
    for x, y in loader:  # LOADER-NEXT
        loss = ((compiled(x).squeeze(1) - y) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
print("done")
