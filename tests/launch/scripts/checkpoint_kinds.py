"""Hand-made test script (tests/launch/test_run_budget_records.py): a checkpoint of each kind, one a step, and a
library (argv[2], a folder named site-packages) that calls model.eval() and torch.save for the user.
argv: a folder to write into, the library's folder, "torch-first" or "safetensors-first" (the import order)."""

import os
import sys

out, library, order = sys.argv[1], sys.argv[2], sys.argv[3]
# isort: off
if order == "safetensors-first":
    import safetensors.torch  # imports torch itself, while it is being imported
    import torch
else:
    import torch
    import safetensors.torch  # after torch: wrapped as it is imported
# isort: on
import torch.distributed.checkpoint as dcp  # noqa: E402

sys.path.insert(0, library)
import trainerlib  # noqa: E402

model = trainerlib.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))  # its own train()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(6):
    model(torch.ones(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
    if step == 1:
        safetensors.torch.save_file(model.state_dict(), os.path.join(out, "m.safetensors"))  # SAFE-FILE
    if step == 2:
        safetensors.torch.save_model(model, os.path.join(out, "model.safetensors"))  # SAFE-MODEL
    if step == 3:
        dcp.save({"model": model.state_dict()}, checkpoint_id=os.path.join(out, "dcp"))  # DCP-SAVE
    if step == 4:
        trainerlib.evaluate(model)  # USER-EVAL
        trainerlib.save(model, os.path.join(out, "lib.pt"))  # USER-SAVE
print("done")
