"""A small JAX MLP training loop that records itself, without gpudiag: a jax.profiler perfetto trace of a few
steps and per-step memory_stats (fixtures/trace/jax and fixtures/memory/jax were captured with it).

Each step ends with a `float(loss)` (a host sync: `block_until_ready` under the
hood) for logging, which the sync analyzer should see in the trace.

    python examples/jax_self_traced.py OUT_DIR
"""

import json
import os
import sys
import time

import jax
import jax.numpy as jnp

out = sys.argv[1] if len(sys.argv) > 1 else None
key = jax.random.PRNGKey(0)
k1, k2, k3 = jax.random.split(key, 3)
params = {"w1": jax.random.normal(k1, (1024, 4096)) * 0.02, "w2": jax.random.normal(k2, (4096, 10)) * 0.02}
x = jax.random.normal(k3, (2048, 1024))
y = jax.random.randint(k3, (2048,), 0, 10)


def loss_fn(p, x, y):
    h = jax.nn.relu(x @ p["w1"])
    logits = h @ p["w2"]
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(y.shape[0]), y])


@jax.jit
def step(p, x, y):
    loss, g = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, p, g), loss


stats = []
for _ in range(5):  # warm-up and compile
    params, loss = step(params, x, y)
    float(loss)
if out:
    os.makedirs(out, exist_ok=True)
    jax.profiler.start_trace(os.path.join(out, "jax_trace"), create_perfetto_trace=True)
for i in range(5):
    params, loss = step(params, x, y)
    print("step", i, float(loss))
    dev = jax.devices()[0]
    stats.append(
        {
            "kind": "memory_stats",
            "rank": 0,
            "step": i,
            "t_ns": time.time_ns(),
            "framework": "jax",
            "stats": dev.memory_stats(),
        }
    )
if out:
    jax.profiler.stop_trace()
    with open(os.path.join(out, "stats.jsonl"), "w") as f:
        for s in stats:
            f.write(json.dumps(s) + "\n")
