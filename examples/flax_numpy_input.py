"""A Flax/optax CNN fed by numpy batches built in Python, one sample at a time: the GPU waits for the input.

Images are "decoded" and augmented per sample in a Python loop (make_batch, INPUT-1: a random crop, a flip and a
normalisation in numpy for each of the batch's rows), in the loop's own thread, right before each jitted step
(INPUT-2). Building a batch takes the host several milliseconds, the step a fraction of one on a GPU. The fix is
to build batches ahead of the step: a prefetching thread or tf.data/grain with workers, and jax.device_put of the
next batch while the current step runs. No gpudiag marker.

    python examples/flax_numpy_input.py --steps 200 [--batch 128]
"""

import argparse

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--batch", type=int, default=128)
args = parser.parse_args()


class SmallCNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(32, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), (2, 2))
        x = nn.relu(nn.Conv(64, (3, 3))(x))
        x = x.mean(axis=(1, 2))
        return nn.Dense(10)(x)


@jax.jit
def train_step(state, images, labels):
    def loss_fn(params):
        logits = state.apply_fn({"params": params}, images)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    return state.apply_gradients(grads=grads), loss


rng = np.random.default_rng(0)
raw_images = rng.integers(0, 256, (2048, 40, 40, 3), dtype=np.uint8)  # the "dataset" on the host
raw_labels = rng.integers(0, 10, 2048).astype(np.int32)
mean, std = np.array([120.0, 115.0, 100.0]), np.array([60.0, 58.0, 62.0])


def make_batch(batch):  # INPUT-1: per-sample numpy work in the loop's own thread
    images = np.empty((batch, 32, 32, 3), np.float32)
    labels = np.empty(batch, np.int32)
    for i in range(batch):
        k = rng.integers(len(raw_images))
        top, left = rng.integers(0, 9, 2)
        image = raw_images[k, top : top + 32, left : left + 32].astype(np.float32)
        if rng.random() < 0.5:
            image = image[:, ::-1]
        image = (image - mean) / std
        for _ in range(3):  # a light blur, as augmentation pipelines do
            image = 0.5 * image + 0.25 * (np.roll(image, 1, axis=0) + np.roll(image, -1, axis=0))
        images[i], labels[i] = image, raw_labels[k]
    return images, labels


model = SmallCNN()
params = model.init(jax.random.PRNGKey(0), jnp.zeros((1, 32, 32, 3)))["params"]
state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optax.adamw(1e-3))
for step in range(args.steps):
    images, labels = make_batch(args.batch)  # INPUT-2: the step waits for this batch
    state, loss = train_step(state, images, labels)
    if step % 50 == 0:
        print(f"step {step} loss {float(loss):.4f}", flush=True)
jax.block_until_ready(state.params)
