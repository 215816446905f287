"""A Flax/optax MLP trained with a jitted step on small batches: the GPU finishes each step long before the host
has dispatched the next one. No gpudiag marker.

The shape of many first JAX scripts: a flax.linen MLP, an optax AdamW TrainState, one `@jax.jit` train_step per
batch (STEP-1), the batch moved to the device each step and the loss printed every --log-every steps. With a batch
of 64 rows the step's kernels take tens of microseconds on a GPU, while the host's dispatch of the jitted call,
the transfer of the batch and the Python around it take longer: the GPU idles between steps. The fix is more work
per dispatch (a larger batch, or jax.lax.scan over several batches in one jitted call).

    python examples/flax_host_bound.py --steps 2000 [--batch 64] [--clock-out clocks.json]

--clock-out FILE writes the script's own stopwatch: each step's host time (time.perf_counter around the step's
lines, the device synchronized at both ends), for comparing with gpudiag's step records.
"""

import argparse
import json
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=2000)
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--width", type=int, default=256)
parser.add_argument("--log-every", type=int, default=100)
parser.add_argument("--clock-out", default=None)
args = parser.parse_args()


class MLP(nn.Module):
    width: int

    @nn.compact
    def __call__(self, x):
        for _ in range(3):
            x = nn.relu(nn.Dense(self.width)(x))
        return nn.Dense(10)(x)


@jax.jit
def train_step(state, x, y):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


rng = np.random.default_rng(0)
features = rng.standard_normal((8192, 128)).astype(np.float32)
labels = rng.integers(0, 10, 8192).astype(np.int32)
model = MLP(args.width)
params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 128)))["params"]
state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adamw(1e-3))

step_ms = []
for step in range(args.steps):
    rows = rng.integers(0, len(features), args.batch)
    if args.clock_out:
        jax.block_until_ready(state.params)
        started = time.perf_counter()
    x, y = jnp.asarray(features[rows]), jnp.asarray(labels[rows])
    state, loss = train_step(state, x, y)  # STEP-1: one small jitted step per dispatch
    if args.clock_out:
        jax.block_until_ready(loss)
        step_ms.append((time.perf_counter() - started) * 1e3)
    if step % args.log_every == 0:
        print(f"step {step} loss {float(loss):.4f}", flush=True)
jax.block_until_ready(state.params)
if args.clock_out:
    with open(args.clock_out, "w") as f:
        json.dump({"step_ms": step_ms}, f)
