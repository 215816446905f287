"""A JAX loop whose evaluation runs plain jnp operations outside jit: the shape of many JAX examples.

A linear model is trained by a jitted update per batch (no gpudiag marker: the jitted calls are the steps). Every
--eval-every steps, accuracy() computes argmax, equality and mean with plain jnp calls, outside jit: the first time
they run, JAX compiles one executable per operation and input shape. Those compiles are first compiles, not
recompiles; later evaluations reuse them.

    python examples/jax_eval_outside_jit.py --steps 60 --eval-every 40
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--eval-every", type=int, default=40)
args = parser.parse_args()


@jax.jit
def update(w, x, y):
    def loss(w):
        return jnp.mean((x @ w - y) ** 2)

    return w - 0.01 * jax.grad(loss)(w)


def accuracy(w, x, y):  # plain jnp operations, outside jit
    pred = jnp.argmax(x @ w, axis=1)
    return jnp.mean(pred == jnp.argmax(y, axis=1))


rng = np.random.default_rng(0)
w = jnp.zeros((32, 4))
for step in range(args.steps):
    x = jnp.asarray(rng.standard_normal((64, 32)), dtype=jnp.float32)
    y = jnp.asarray(rng.standard_normal((64, 4)), dtype=jnp.float32)
    w = update(w, x, y)
    if step and step % args.eval_every == 0:
        print("step", step, "accuracy", float(accuracy(w, x, y)), flush=True)
w.block_until_ready()
