"""A small conv net with cudnn.benchmark=True whose epoch ends in a smaller batch: that step meets a new shape.

The DataLoader reads a TensorDataset of --samples images in batches of --batch with drop_last=False, and
--samples is not a multiple of --batch (1,000 = 15 x 64 + 40), so the last batch of each epoch holds 40 images
(NEW-SHAPE). With `torch.backends.cudnn.benchmark = True` cuDNN times every convolution algorithm the first
time it meets a shape: the step that trains on the first 40-image batch is slow once (later epochs reuse the
cached choice), and the caching allocator may grow for the new sizes. `gpudiag profile` records the new shape
(a `new-shape` work record) and the report keeps that step out of the steady figures (step_budget.new_shape).
The fixes: drop_last=True or pad the last batch, fixed image sizes, or cudnn.benchmark=False when shapes vary.
On a CPU there is no cuDNN: the step is not slower, the record and the kept-apart step are the same.

    python examples/cudnn_new_shape.py --epochs 4
    python examples/cudnn_new_shape.py --device cpu --epochs 3 --samples 500 --batch 32
"""

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=32, help="image height and width")
    parser.add_argument("--channels", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = True  # cuDNN tunes its convolution algorithms for each new input shape
    if args.device == "cpu":
        torch.set_num_threads(1)
    c = args.channels
    model = nn.Sequential(
        nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
        nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * c, 10),
    ).to(args.device)  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images = torch.randn(args.samples, 3, args.size, args.size)
    labels = torch.randint(0, 10, (args.samples,))
    loader = DataLoader(TensorDataset(images, labels), batch_size=args.batch, shuffle=True, drop_last=False)
    for epoch in range(args.epochs):
        total, seen = 0.0, 0
        for x, y in loader:  # NEW-SHAPE: the last batch of an epoch holds samples % batch images
            x, y = x.to(args.device, non_blocking=True), y.to(args.device, non_blocking=True)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item() * len(y)
            seen += len(y)
        print(f"epoch {epoch}: loss {total / seen:.4f} over {seen} images, last batch {len(y)}")


if __name__ == "__main__":
    main()
