"""A small character-level GPT trained by a module-level loop that evaluates on two splits and saves a checkpoint
every --eval-interval iterations, optionally under torch.compile: the shape of many single-file training scripts.

Everything is module-level code (no main function), so light mode's records and the trace name this file's lines.
Every --eval-interval iterations (and at the last one) the model runs --eval-batches batches of the training and
the held-out text between model.eval() and model.train() (EVALUATION), then torch.save writes the model and AdamW
state (CHECKPOINT). With --compile the model goes through torch.compile: the first training call and the first
evaluation call each compile a graph.

--phase-clock-out FILE times each training step's phases by hand, as a user checking gpudiag would: the device
synchronized and time.perf_counter read around the batch, the model's call, the loss, zero_grad, the backward
pass and the optimizer step (a separate run: its syncs change the timing; the loss and zero_grad apart since 12-06).

--clock-out FILE writes the script's own stopwatch (what a user would time by hand, time.time_ns()): when the
script started, when its imports ended, each evaluation and checkpoint span, the first compiled calls, the first
and last optimizer steps, and its end. Tests compare gpudiag's run budget with it.

    python examples/char_gpt.py --iters 600 --eval-interval 200 [--compile] [--clock-out clocks.json]
"""

import time

SCRIPT_START_NS = time.time_ns()

import argparse  # noqa: E402
import atexit  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

IMPORTS_DONE_NS = time.time_ns()

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
parser.add_argument("--iters", type=int, default=600)
parser.add_argument("--eval-interval", type=int, default=200)
parser.add_argument("--eval-batches", type=int, default=100)
parser.add_argument("--batch", type=int, default=32)
parser.add_argument("--block", type=int, default=64)
parser.add_argument("--embed", type=int, default=256)
parser.add_argument("--layers", type=int, default=6)
parser.add_argument("--heads", type=int, default=4)
parser.add_argument("--compile", action="store_true")
parser.add_argument("--clock-out", default=None)
parser.add_argument("--phase-clock-out", default=None)
args = parser.parse_args()
torch.manual_seed(0)
clocks = {"script_start_ns": SCRIPT_START_NS, "imports_done_ns": IMPORTS_DONE_NS, "evaluation": [], "checkpoint": []}


def write_clocks():
    clocks["script_end_ns"] = time.time_ns()
    if args.clock_out:
        with open(args.clock_out, "w") as f:
            json.dump(clocks, f, indent=1)


atexit.register(write_clocks)

# the text: words drawn from a small vocabulary with a fixed seed (our own corpus, no download)
words = "the a gpu step time waits for host input kernel launch sync loss batch model train eval".split()
picks = torch.randint(len(words), (200_000,), generator=torch.Generator().manual_seed(1)).tolist()
text = " ".join(words[i] for i in picks)
chars = sorted(set(text))
data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
split = int(0.9 * len(data))
train_data, val_data = data[:split], data[split:]


class Block(nn.Module):
    def __init__(self, embed, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(embed), nn.LayerNorm(embed)
        self.qkv, self.proj = nn.Linear(embed, 3 * embed), nn.Linear(embed, embed)
        self.mlp = nn.Sequential(nn.Linear(embed, 4 * embed), nn.GELU(), nn.Linear(4 * embed, embed))
        self.heads = heads

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class CharGPT(nn.Module):
    def __init__(self, vocab, block, embed, layers, heads):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, embed), nn.Embedding(block, embed)
        self.blocks = nn.Sequential(*(Block(embed, heads) for _ in range(layers)))
        self.ln, self.head = nn.LayerNorm(embed), nn.Linear(embed, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


def batch_of(source):
    starts = torch.randint(len(source) - args.block - 1, (args.batch,))
    x = torch.stack([source[s : s + args.block] for s in starts]).to(args.device)
    y = torch.stack([source[s + 1 : s + args.block + 1] for s in starts]).to(args.device)
    return x, y


model = CharGPT(len(chars), args.block, args.embed, args.layers, args.heads).to(args.device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
if args.compile:
    model = torch.compile(model)
checkpoint = os.path.join(tempfile.mkdtemp(prefix="char_gpt_"), "ckpt.pt")
first_eval_call = first_train_call = True
phase_ms = {"batch": [], "forward": [], "loss": [], "zero_grad": [], "backward": [], "optimizer": []}
phase_at = [0.0]


def mark(phase):
    """--phase-clock-out: the host ms of the phase that ends here, the device synchronized first."""
    if not args.phase_clock_out:
        return
    if args.device == "cuda":
        torch.cuda.synchronize()
    now = time.perf_counter()
    if phase != "start":
        phase_ms[phase].append((now - phase_at[0]) * 1e3)
    phase_at[0] = now


def write_phase_clocks():
    if args.phase_clock_out:
        with open(args.phase_clock_out, "w") as f:
            json.dump({"phase_ms": phase_ms}, f)


atexit.register(write_phase_clocks)

for it in range(args.iters):
    if it % args.eval_interval == 0 or it == args.iters - 1:
        started = time.time_ns()
        model.eval()  # EVALUATION
        losses = {}
        with torch.no_grad():
            for name, source in (("train", train_data), ("val", val_data)):
                total = 0.0
                for _ in range(args.eval_batches):
                    x, y = batch_of(source)
                    if first_eval_call:
                        call_started = time.time_ns()
                    logits = model(x)
                    if first_eval_call:
                        torch.cuda.synchronize() if args.device == "cuda" else None
                        clocks["first_eval_call"] = [call_started, time.time_ns()]
                        first_eval_call = False
                    total += F.cross_entropy(logits.flatten(0, 1), y.flatten()).item()
                losses[name] = total / args.eval_batches
        model.train()
        clocks["evaluation"].append([started, time.time_ns()])
        started = time.time_ns()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, checkpoint)  # CHECKPOINT
        clocks["checkpoint"].append([started, time.time_ns()])
        print(f"iter {it}: train loss {losses['train']:.3f}, val loss {losses['val']:.3f}", flush=True)
    mark("start")
    x, y = batch_of(train_data)
    mark("batch")
    if first_train_call:
        call_started = time.time_ns()
    logits = model(x)
    mark("forward")
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    mark("loss")
    optimizer.zero_grad(set_to_none=True)
    mark("zero_grad")
    loss.backward()
    mark("backward")
    if first_train_call:
        torch.cuda.synchronize() if args.device == "cuda" else None
        clocks["first_train_call"] = [call_started, time.time_ns()]
        first_train_call = False
    optimizer.step()
    mark("optimizer")
    if it == 0:
        clocks["first_step_ns"] = time.time_ns()
clocks["last_step_ns"] = time.time_ns()
