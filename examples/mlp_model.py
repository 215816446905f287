"""The model and data of examples/train_mlp.py, a sibling module the script imports (as real scripts do)."""

from __future__ import annotations

import torch
from torch import nn


def make_model(width: int, depth: int) -> nn.Module:
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def make_batch(generator: torch.Generator, batch: int, width: int, device: str):
    x = torch.randn(batch, width, generator=generator)
    y = torch.randint(0, 10, (batch,), generator=generator)
    return x.to(device), y.to(device)
