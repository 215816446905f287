"""A small Lightning regression run: the library's own loop, a validation pass each epoch, AdamW.

Why: Lightning calls ``optimizer.step(closure)`` and runs the forward, the loss and the backward inside that closure,
so a profiler that times the optimizer step as a whole reads the whole step as the optimizer's (issue 31). The loop
here is Lightning's code, not ours; the model, data and sizes are ours.

    python3 examples/lightning_regression.py --epochs 3
    gpudiag profile -- python3 examples/lightning_regression.py --epochs 3
"""

from __future__ import annotations

import argparse

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Regressor(L.LightningModule):
    def __init__(self, width: int):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(32, width),
            torch.nn.GELU(),
            torch.nn.Linear(width, width),
            torch.nn.GELU(),
            torch.nn.Linear(width, 1),
        )

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss, prog_bar=False)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--accelerator", default="auto")
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.samples, 32, generator=g)
    y = x[:, :4].sum(dim=1, keepdim=True) + 0.1 * torch.randn(args.samples, 1, generator=g)
    split = args.samples * 7 // 8
    train = DataLoader(TensorDataset(x[:split], y[:split]), batch_size=args.batch, shuffle=True)
    val = DataLoader(TensorDataset(x[split:], y[split:]), batch_size=256)
    trainer = L.Trainer(
        max_epochs=args.epochs,
        accelerator=args.accelerator,
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Regressor(args.width), train, val)


if __name__ == "__main__":
    main()
