"""A character-level language model trained with a hand-written SGD update: no torch.optim, no marker.

The shape of many research and teaching scripts (minGPT-style loops, the "from scratch" tutorials):
the weights are updated in place (`p.data.add_(p.grad, alpha=-lr)`), the gradients cleared by hand,
and the loss printed every step with `loss.item()` (SYNC at the line marked SYNC-1). gpudiag sees its
steps through the end of each `loss.backward()`.

    python examples/sgd_by_hand.py --steps 40 --device cuda
"""

import argparse

import torch
import torch.nn as nn

TEXT = (
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in "
    "want of a wife. However little known the feelings or views of such a man may be on his first entering "
    "a neighbourhood, this truth is so well fixed in the minds of the surrounding families, that he is "
    "considered the rightful property of some one or other of their daughters. "
) * 64


class CharModel(nn.Module):
    def __init__(self, vocab, width):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.rnn = nn.GRU(width, width, batch_first=True)
        self.head = nn.Linear(width, vocab)

    def forward(self, x):
        h, _ = self.rnn(self.embed(x))
        return self.head(h)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.5)
    args = parser.parse_args()
    torch.manual_seed(0)
    chars = sorted(set(TEXT))
    data = torch.tensor([chars.index(c) for c in TEXT], dtype=torch.long, device=args.device)
    model = CharModel(len(chars), args.width).to(args.device)
    for step in range(args.steps):
        starts = torch.randint(0, len(data) - args.context - 1, (args.batch,), device=args.device)
        offsets = torch.arange(args.context, device=args.device)
        x = data[starts[:, None] + offsets]
        y = data[starts[:, None] + offsets + 1]
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-args.lr)
                p.grad = None
        print(f"step {step} loss {loss.item():.4f}")  # SYNC-1


if __name__ == "__main__":
    main()
