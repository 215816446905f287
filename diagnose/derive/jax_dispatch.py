"""What shortens a JAX step whose GPU waits for the host: the fix the idle, launch and step-budget findings share.

XLA launches a jitted step's kernels together (one cuGraphLaunch of its command buffer), so a JAX step that leaves
the GPU idle waits on the host's dispatch of each jitted call and on the Python between calls, never on per-kernel
launches: torch's advice (torch.compile, CUDA graphs) does not apply. Each finding says the symptom its own way and
ends with this.
"""

FIX = (
    "Put more of the step into one jitted function (jax.lax.scan over several steps or microbatches, larger "
    "batches), keep per-step Python work off the step (float(loss) or np.asarray every step blocks: log every N "
    "steps), build batches ahead (jax.device_put in a prefetching iterator), and donate the state's buffers "
    "(jax.jit(donate_argnums=...))."
)
