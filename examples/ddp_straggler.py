"""DDP with a planted straggler: rank 1 is late to every step's gradient all-reduce.

The ground truth for the comm analyzer (``diagnose/analyzers/comm.py``). Two ranks train
the same MLP under DistributedDataParallel. Before ``loss.backward()`` of every step the
straggler rank (``--straggler-rank``, default 1) is delayed, one of two ways (``--cause``):
  sleep    line 76, STRAGGLER-SLEEP: ``time.sleep(--delay-ms / 1000)`` on the host: its GPU runs
           dry, the others wait inside the first all-reduce of the backward (a host-side delay:
           a sync, data loading);
  compute  line 78, STRAGGLER-COMPUTE: extra matmuls on its GPU (``_extra_work``), enqueued before the backward:
           its backward, hence its all-reduces, start late (unbalanced work or data).
Either way the other rank waits about ``--delay-ms`` per step in the collective; the analyzer
must report ``comm.straggler`` naming rank 1 and ``comm.wait_dominates``.

Two GPUs (NCCL; NVLink SHARP multicast off, as the device docs require — line 39 sets NCCL_NVLS_ENABLE=0):

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node 2 examples/ddp_straggler.py --out OUT
    gpudiag profile -- torchrun --nproc-per-node 2 examples/ddp_straggler.py        # gpudiag's own window

CPU (gloo; collectives then appear as ``gloo:*`` cpu ops, not NCCL kernels):

    torchrun --nproc-per-node 2 examples/ddp_straggler.py --backend gloo --out OUT

With ``--out`` a torch.profiler window (``--wait``/``--warmup``/``--active`` steps) writes
``OUT/trace/rank<N>.json.gz`` per rank, the run-folder layout ``gpudiag report OUT`` reads
(it also writes a minimal ``OUT/manifest.json`` from rank 0).
"""

import argparse
import gzip
import json
import os
import shutil
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink SHARP multicast off, before any NCCL communicator exists

LAYERS = 6
BATCH = 256


def _model(width: int) -> nn.Module:
    layers = []
    for _ in range(LAYERS):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


def _extra_work(device: torch.device, width: int, delay_ms: float, unit_ms: float) -> None:
    """Matmuls worth about ``delay_ms`` on this device (``unit_ms`` per matmul, from :func:`_calibrate`)."""
    a = torch.randn(width, width, device=device)
    for _ in range(max(1, round(delay_ms / unit_ms))):
        a = torch.tanh(a @ a)


def _calibrate(device: torch.device, width: int) -> float:
    """Milliseconds one ``tanh(a @ a)`` of ``width`` takes here."""
    a = torch.randn(width, width, device=device)
    for _ in range(3):
        a = torch.tanh(a @ a)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(10):
        a = torch.tanh(a @ a)
    _sync(device)
    return max((time.perf_counter() - t0) * 1000.0 / 10, 1e-3)


def _step(ddp, opt, x, y, straggle: bool, args, unit_ms: float) -> None:
    loss = nn.functional.cross_entropy(ddp(x), y)
    if straggle:
        if args.cause == "sleep":
            time.sleep(args.delay_ms / 1000.0)  # STRAGGLER-SLEEP: the host is late, its GPU idles
        else:
            _extra_work(x.device, args.width, args.delay_ms, unit_ms)  # STRAGGLER-COMPUTE: extra GPU work
    loss.backward()  # DDP all-reduces gradient buckets during the backward
    opt.step()
    opt.zero_grad(set_to_none=True)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument("--out", help="folder for trace/rank<N>.json.gz (own profiler window); omit under gpudiag profile")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--wait", type=int, default=2)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--active", type=int, default=5)
    p.add_argument("--straggler-rank", type=int, default=1)
    p.add_argument("--cause", choices=("sleep", "compute"), default="sleep")
    p.add_argument("--delay-ms", type=float, default=40.0)
    p.add_argument("--width", type=int, default=2048)
    args = p.parse_args(argv)

    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.backend == "nccl":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    torch.manual_seed(0)
    model = _model(args.width).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    gen = torch.Generator(device="cpu").manual_seed(1000 + rank)
    x = torch.randn(BATCH, args.width, generator=gen).to(device)
    y = torch.randint(0, 10, (BATCH,), generator=gen).to(device)
    unit_ms = _calibrate(device, args.width) if args.cause == "compute" else 1.0
    straggle = rank == args.straggler_rank

    prof = None
    if args.out:
        trace_dir = os.path.join(args.out, "trace")
        os.makedirs(trace_dir, exist_ok=True)
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        prof = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(wait=args.wait, warmup=args.warmup, active=args.active, repeat=1),
            on_trace_ready=lambda pr: _export(pr, trace_dir, rank),
        )
        prof.start()
    for _ in range(args.steps):
        _step(ddp, opt, x, y, straggle, args, unit_ms)
        if prof is not None:
            prof.step()
    _sync(device)
    if prof is not None:
        prof.stop()
    dist.barrier()
    if args.out and rank == 0:
        _manifest(args, world)
    dist.destroy_process_group()


def _export(prof, trace_dir: str, rank: int) -> None:
    """Write ``rank<N>.json.gz`` through a temporary name, so a killed run leaves only whole files."""
    raw = os.path.join(trace_dir, f".rank{rank}.json.tmp")
    prof.export_chrome_trace(raw)
    final = os.path.join(trace_dir, f"rank{rank}.json.gz")
    with open(raw, "rb") as src, gzip.open(final + ".tmp", "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.replace(final + ".tmp", final)
    os.unlink(raw)


def _manifest(args, world: int) -> None:
    manifest = {
        "schema": "gpudiag.run/1",
        "command": ["examples/ddp_straggler.py"],
        "exit_code": 0,
        "ranks": list(range(world)),
        "artifacts": {"trace": [f"trace/rank{r}.json.gz" for r in range(world)]},
        "planted": {
            "straggler_rank": args.straggler_rank,
            "cause": args.cause,
            "delay_ms": args.delay_ms,
            "backend": args.backend,
        },
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()
