"""A JAX training loop that compiles again mid-run: batches of varying sequence length, not padded to buckets.

Plain JAX, unchanged-style (like jax_unchanged.py: one `@jax.jit` update per batch, `float(loss)` logging, no
gpudiag marker). Each batch is (batch, seq_len, features) with seq_len drawn from the lengths seen so far;
a new length joins every `--new-every` steps (8 lengths in all). jit compiles `update` once per input shape,
so the first batch of each new length recompiles it at the line marked RECOMPILE: those steps take tens of ms
against ~1 ms. gpudiag names them (step_budget.compilation) and keeps them out of the steady figures.
The fix would be to pad each batch up to one of a few bucket lengths (or to one length).

    python examples/jax_recompile.py --steps 120 --new-every 15
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

LENGTHS = (16, 24, 32, 48, 64, 96, 128, 160)  # the sequence lengths batches come in, in order of appearance


def init(key, sizes):
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        params.append((jax.random.normal(sub, (fan_in, fan_out)) / np.sqrt(fan_in), jnp.zeros(fan_out)))
    return params


def predict(params, x):
    x = x.mean(axis=1)  # pool over the sequence: any length gives the same output shape
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--new-every", type=int, default=15, help="a new sequence length joins every N steps")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--width", type=int, default=256)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    params = init(jax.random.PRNGKey(0), [args.features, args.width, args.width, 1])
    true_w = rng.normal(size=(args.features, 1)).astype(np.float32)
    for i in range(args.steps):
        known = LENGTHS[: min(len(LENGTHS), 1 + i // args.new_every)]
        # the newest length comes first when it joins, then lengths are drawn from those seen so far
        seq_len = known[-1] if i % args.new_every == 0 else int(rng.choice(known))
        x = rng.normal(size=(args.batch, seq_len, args.features)).astype(np.float32)
        y = x.mean(axis=1) @ true_w
        params, loss = update(params, x, y, 0.01)  # RECOMPILE: a new seq_len compiles update again
        print(f"step {i} seq_len {seq_len} loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
