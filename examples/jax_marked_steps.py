"""A small seeded JAX MLP training loop (GPU when JAX has one, else CPU), steps marked with diagnose.step().

Planted: ``float(loss)`` every step (a host-device sync per step), and a small batch (short
kernels). JAX has no optimizer hook, so the one-line marker ``diagnose.step()`` tells
gpudiag where steps end; outside `gpudiag profile` it does nothing.

    gpudiag profile -- python examples/jax_marked_steps.py --steps 30
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp

try:
    import diagnose
except ImportError:  # gpudiag not installed: the marker is optional
    diagnose = None


def init_params(key, width: int, depth: int):
    params = []
    for _ in range(depth):
        key, sub = jax.random.split(key)
        params.append((jax.random.normal(sub, (width, width)) / jnp.sqrt(width), jnp.zeros(width)))
    key, sub = jax.random.split(key)
    params.append((jax.random.normal(sub, (width, 10)) / jnp.sqrt(width), jnp.zeros(10)))
    return params


def loss_fn(params, x, y):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    logits = x @ w + b
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return [(w - 0.05 * gw, b - 0.05 * gb) for (w, b), (gw, gb) in zip(params, grads)], loss


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    key = jax.random.PRNGKey(args.seed)
    params = init_params(key, args.width, args.depth)
    for step in range(args.steps):
        key, kx, ky = jax.random.split(key, 3)
        x = jax.random.normal(kx, (args.batch, args.width))
        y = jax.random.randint(ky, (args.batch,), 0, 10)
        params, loss = train_step(params, x, y)
        value = float(loss)  # SYNC: planted host-device sync every step
        if diagnose is not None:
            diagnose.step()
        print(f"step {step} loss {value!r}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
