"""A small DCGAN-style generator and discriminator trained on 64x64 images from a DataLoader with 2 workers whose
items are decoded on the CPU, profiled by the script itself with torch.profiler (the way a trace reaches gpudiag
from someone else: `gpudiag report trace.json`, no run folder).

Each worker needs about two iterations' time for a batch, so the loop takes a batch, then waits for the next: one
iteration in two waits, and the median iteration is a fast one. gpudiag should cost the input by the summed wait,
not by the median iteration's.

    python examples/gan_loader.py --trace-out gan.trace.json [--workers 2] [--iters 60]
"""

import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--iters", type=int, default=60)
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--decode-rounds", type=int, default=4)
parser.add_argument("--trace-out", required=True)
args = parser.parse_args()
torch.manual_seed(0)


class Faces(Dataset):
    """64x64 RGB images made from their index, with a CPU 'decode' (FFT rounds) per item."""

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        img = rng.standard_normal((3, 64, 64)).astype(np.float32)
        for _ in range(args.decode_rounds):
            img = np.real(np.fft.ifft2(np.fft.fft2(img) * 0.98)).astype(np.float32)
        return torch.from_numpy(np.tanh(img))


def generator(z=100, f=64):
    return nn.Sequential(
        nn.ConvTranspose2d(z, f * 8, 4, 1, 0, bias=False), nn.BatchNorm2d(f * 8), nn.ReLU(True),
        nn.ConvTranspose2d(f * 8, f * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(f * 4), nn.ReLU(True),
        nn.ConvTranspose2d(f * 4, f * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(f * 2), nn.ReLU(True),
        nn.ConvTranspose2d(f * 2, f, 4, 2, 1, bias=False), nn.BatchNorm2d(f), nn.ReLU(True),
        nn.ConvTranspose2d(f, 3, 4, 2, 1, bias=False), nn.Tanh(),
    )  # fmt: skip


def discriminator(f=64):
    return nn.Sequential(
        nn.Conv2d(3, f, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, True),
        nn.Conv2d(f, f * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(f * 2), nn.LeakyReLU(0.2, True),
        nn.Conv2d(f * 2, f * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(f * 4), nn.LeakyReLU(0.2, True),
        nn.Conv2d(f * 4, 1, 8, 1, 0, bias=False), nn.Flatten(),
    )  # fmt: skip


netG, netD = generator().to(args.device), discriminator().to(args.device)
optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
loader = DataLoader(Faces(), batch_size=args.batch, shuffle=True, num_workers=args.workers, drop_last=True)

activities = [torch.profiler.ProfilerActivity.CPU]
if args.device == "cuda":
    activities.append(torch.profiler.ProfilerActivity.CUDA)
schedule = torch.profiler.schedule(wait=10, warmup=2, active=args.iters - 14, repeat=1)
with torch.profiler.profile(
    activities=activities,
    schedule=schedule,
    on_trace_ready=lambda p: p.export_chrome_trace(args.trace_out),
) as prof:
    for i, real in enumerate(loader):
        if i >= args.iters:
            break
        real = real.to(args.device, non_blocking=True)
        z = torch.randn(real.shape[0], 100, 1, 1, device=args.device)
        fake = netG(z)
        ones = torch.ones(real.shape[0], 1, device=args.device)
        lossD = F.binary_cross_entropy_with_logits(netD(real), ones) + F.binary_cross_entropy_with_logits(
            netD(fake.detach()), torch.zeros_like(ones)
        )
        optD.zero_grad(set_to_none=True)
        lossD.backward()
        optD.step()
        lossG = F.binary_cross_entropy_with_logits(netD(fake), ones)
        optG.zero_grad(set_to_none=True)
        lossG.backward()
        optG.step()
        prof.step()
print("done")
