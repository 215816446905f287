"""A Flax/optax MLP whose per-epoch evaluation runs outside jit: the evaluation, not the steps, holds the run back.

Training is one jitted train_step per batch (STEP-1). After every epoch, evaluate() (EVAL-1) runs the model with
model.apply, un-jitted, over the validation set in small batches, and turns each batch's accuracy into a Python
float: every layer is an eager JAX dispatch and every batch a host-device sync. The fix is to jit the evaluation
step (jax.jit(eval_step)), evaluate in larger batches, and add the accuracies on the device before one float().
No gpudiag marker.

    python examples/flax_eval_outside_jit.py --epochs 3 --steps-per-epoch 100
"""

import argparse

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--steps-per-epoch", type=int, default=100)
parser.add_argument("--batch", type=int, default=512)
parser.add_argument("--eval-batch", type=int, default=16)
parser.add_argument("--eval-rows", type=int, default=4096)
args = parser.parse_args()


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        for _ in range(4):
            x = nn.gelu(nn.Dense(1024)(x))
        return nn.Dense(10)(x)


@jax.jit
def train_step(state, x, y):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


def evaluate(state, x_val, y_val):  # EVAL-1: un-jitted model.apply and a float() per small batch
    correct = 0.0
    for start in range(0, len(x_val), args.eval_batch):
        logits = model.apply({"params": state.params}, x_val[start : start + args.eval_batch])
        correct += float(jnp.sum(jnp.argmax(logits, -1) == y_val[start : start + args.eval_batch]))
    return correct / len(x_val)


rng = np.random.default_rng(0)
true_w = rng.standard_normal((256, 10)).astype(np.float32)
x_train = rng.standard_normal((16384, 256)).astype(np.float32)
y_train = np.argmax(x_train @ true_w, -1).astype(np.int32)
x_val = jnp.asarray(rng.standard_normal((args.eval_rows, 256)).astype(np.float32))
y_val = jnp.argmax(x_val @ true_w, -1)
model = MLP()
params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 256)))["params"]
state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adamw(1e-3))
for epoch in range(args.epochs):
    for step in range(args.steps_per_epoch):
        start = (epoch * args.steps_per_epoch + step) * args.batch % (len(x_train) - args.batch)
        x, y = x_train[start : start + args.batch], y_train[start : start + args.batch]
        state, loss = train_step(state, x, y)  # STEP-1
    accuracy = evaluate(state, x_val, y_val)  # EVAL-2: once per epoch
    print(f"epoch {epoch} loss {float(loss):.4f} val accuracy {accuracy:.3f}", flush=True)
jax.block_until_ready(state.params)
