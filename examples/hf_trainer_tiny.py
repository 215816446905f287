"""A small GPT-2 language model trained by Hugging Face's Trainer (the library's loop, not ours): evaluation and a
safetensors checkpoint every --every steps, logging every 50. The model is built from a config (no download) and
the data are token ids drawn with a fixed seed.

Everything that is slow here happens inside transformers' code: Trainer.evaluate calls model.eval(), Trainer's
_save_checkpoint writes model.safetensors and torch.saves the optimizer. gpudiag should name the Trainer's frame
and this file's trainer.train() line.

--clock-out FILE writes the script's own stopwatch (time.time_ns()): script start, imports done, trainer.train()'s
start and end, and the end of each evaluation and save as the Trainer's callbacks see them.

    python examples/hf_trainer_tiny.py --steps 300 --every 100 [--clock-out clocks.json]
"""

import time

SCRIPT_START_NS = time.time_ns()

import argparse  # noqa: E402
import atexit  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

IMPORTS_DONE_NS = time.time_ns()

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--every", type=int, default=100)
parser.add_argument("--eval-items", type=int, default=512)
parser.add_argument("--clock-out", default=None)
args = parser.parse_args()
clocks = {"script_start_ns": SCRIPT_START_NS, "imports_done_ns": IMPORTS_DONE_NS, "evaluate_end": [], "save_end": []}
atexit.register(
    lambda: args.clock_out and json.dump({**clocks, "script_end_ns": time.time_ns()}, open(args.clock_out, "w"))
)


class TokenIds(torch.utils.data.Dataset):
    def __init__(self, n, length=128, vocab=2048, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Stopwatch(TrainerCallback):
    def on_evaluate(self, *a, **k):
        clocks["evaluate_end"].append(time.time_ns())

    def on_save(self, *a, **k):
        clocks["save_end"].append(time.time_ns())


config = GPT2Config(vocab_size=2048, n_positions=128, n_embd=256, n_layer=4, n_head=4)
model = GPT2LMHeadModel(config)
out = tempfile.mkdtemp(prefix="hf_trainer_tiny_")
strategy = (
    "eval_strategy" if "eval_strategy" in inspect.signature(TrainingArguments).parameters else "evaluation_strategy"
)
training_args = TrainingArguments(
    output_dir=out,
    max_steps=args.steps,
    per_device_train_batch_size=16,
    per_device_eval_batch_size=32,
    learning_rate=3e-4,
    logging_steps=50,
    save_steps=args.every,
    eval_steps=args.every,
    report_to=[],
    dataloader_num_workers=0,
    **{strategy: "steps"},
)
trainer = Trainer(
    model=model,
    args=training_args,
    train_dataset=TokenIds(args.steps * 16),
    eval_dataset=TokenIds(args.eval_items, seed=1),
    callbacks=[Stopwatch()],
)
clocks["train_start_ns"] = time.time_ns()
trainer.train()
clocks["train_end_ns"] = time.time_ns()
