"""Edge cases of light mode's work records (tests/launch/test_periodic_work.py): a save before the first step,
saves that must not count, a nested save, an evaluation with children, a save that fails. Prints nothing; writes into argv[1]."""

import io
import os
import sys
import threading

import torch
import torch.nn as nn

out = sys.argv[1]


class SavesInsideItsPickling:
    """torch.save of this object calls torch.save again while it is pickled: one record, the outer call."""

    def __getstate__(self):
        torch.save({"inner": torch.zeros(4)}, io.BytesIO())
        return {}


model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 4), nn.Dropout(0.1)))
other = nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch.save(model.state_dict(), os.path.join(out, "before.pt"))  # EDGE-BEFORE the first step: step -1


def train_step():
    loss = model(torch.ones(2, 8)).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()


for step in range(6):
    train_step()
    if step == 1:
        torch.save(SavesInsideItsPickling(), os.path.join(out, "nested.pt"))  # EDGE-NESTED
        worker = threading.Thread(target=torch.save, args=(model.state_dict(), os.path.join(out, "thread.pt")))
        worker.start()
        worker.join()  # a save on another thread: no record
    if step == 2:
        model.eval()  # EDGE-EVAL
        other.eval()  # EDGE-OTHER
        other.train()  # another module: does not end the model's span
        with torch.no_grad():
            model(torch.ones(2, 8))
        model.train()
        model.train()  # no span open: nothing
    if step == 3:
        try:
            torch.save({}, os.path.join(out, "missing", "dir", "x.pt"))  # EDGE-FAILS
        except (FileNotFoundError, RuntimeError) as e:
            print(f"save failed as it should: {type(e).__name__}")
