"""A JAX training loop as people write it, with no gpudiag marker: a jitted `update` per batch.

Plain JAX (no flax/optax): an MLP regression on synthetic data, batches made with numpy on the
host, one `@jax.jit` update per batch, a jitted `evaluate` after every epoch and `float(loss)` for
logging each step (a device-to-host copy at the line marked SYNC-1). gpudiag finds the steps from
the jitted function dispatched once per iteration (`update`), not from `evaluate`.

    python examples/jax_unchanged.py --epochs 3 --batches 20
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np


def init(key, sizes):
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        params.append((jax.random.normal(sub, (fan_in, fan_out)) / np.sqrt(fan_in), jnp.zeros(fan_out)))
    return params


def predict(params, x):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def loss_fn(params, x, y):
    return jnp.mean((predict(params, x) - y) ** 2)


@jax.jit
def update(params, x, y, lr):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads), loss


@jax.jit
def evaluate(params, x, y):
    return loss_fn(params, x, y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=512)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    params = init(jax.random.PRNGKey(0), [64, args.width, args.width, 1])
    true_w = rng.normal(size=(64, 1)).astype(np.float32)
    x_val = rng.normal(size=(1024, 64)).astype(np.float32)
    for epoch in range(args.epochs):
        epoch_start = time.perf_counter()
        for i in range(args.batches):
            x = rng.normal(size=(args.batch, 64)).astype(np.float32)
            params, loss = update(params, x, x @ true_w, 0.01)
            print(f"epoch {epoch} batch {i} loss {float(loss):.4f}")  # SYNC-1
        print(f"epoch {epoch} took {time.perf_counter() - epoch_start:.4f} s")
        print(f"epoch {epoch} val loss {float(evaluate(params, x_val, x_val @ true_w)):.4f}")


if __name__ == "__main__":
    main()
