"""Host dispatch and device time of a JAX step, sampled in one step of ``EVERY`` (issue 34 (2)).

The trace window says where a JAX step's time goes, but for a few steps slowed by the profiler. Light mode's jit
boundary (jit_steps, ``Steps.on_jit_step``) knows each step's host time; this adds, in a few untraced steps, the
figures that tell a host-bound step from a device-bound one:

- ``dispatch_ms``: the host time inside jax's call of the step function (the argument checks and transfers, the
  launch of the step's executable): what the host spends to start the step;
- ``ready_ms``: from the call's start until the step's outputs are ready, with nothing of earlier steps left on
  the device when the call began. The device's work for the step is at most this;
- ``queued_ms``: how long the previous step's outputs took to be ready from the sampled call's start (0: they
  were): the device's lag behind the host.

How, in two consecutive steps. At the step before a sampled one, one output of jax's call is kept (the last leaf:
``params, loss`` keeps the loss, which is never donated). At the sampled step, before jax's call, that output is
waited for (``is_ready()`` first, so an idle device costs no wait) and let go (a later call may donate it); then the
call is timed, and its own output waited for. An output not ready at the next call does not make a step
device-bound: on the H100 a Flax step dispatched in 0.50 ms of a 0.56 ms step, its work launched at the call's end,
so the previous step's output was pending at every sampled call while the device idled most of the step
(2026-12-05).

What it costs: the sampled step's Python after the call (``float(loss)``, logging) runs after the device's work
instead of beside it, and a device-bound loop's queue is drained once, which idles the device for about one
dispatch while the host gets ahead again: once in ``EVERY`` steps. A loop that already waits for each step
(``float(loss)`` every step) loses nothing. Steps in between run nothing of this: the boundary compares the step
number with the next sampled one. A JAX without ``Array.is_ready`` (before 0.4.1x) gets ``dispatch_ms`` only.
"""

from __future__ import annotations

import functools
from time import perf_counter_ns

EVERY = 128  # one sampled step in EVERY (a run of 4,682 steps: 36 samples)
FIRST_AFTER_STEADY = 16  # the first sample this many steps after the jit steady state begins (past warm-up's tail)
NEVER = 1 << 62  # due_at before the steady state begins
MAX_DEPTH = 8  # how deep into nested tuples, lists and dicts the kept output is looked for


class JitDispatchSampler:
    """Samples one JAX step in ``EVERY``: the wait for the step before it, its dispatch and its readiness."""

    def __init__(self, jax_module):
        self._tree_leaves = getattr(getattr(jax_module, "tree_util", None), "tree_leaves", None)
        self.next_step = None  # the next step to sample; set by start()
        self.due_at = NEVER  # the next step whose boundary calls for_step (the one before a sample, then the sample)
        self._kept = None  # one output of the step before the sampled one
        # step -> (dispatch ns, ready ns, queued ns): None where not measured
        self.samples: dict[int, tuple[int, int | None, int | None]] = {}

    def start(self, step: int) -> None:
        """The jit steady state begins at ``step``: the first sample a while after it."""
        if self.next_step is None:
            self.next_step = step + FIRST_AFTER_STEADY
            self.due_at = self.next_step - 1

    def for_step(self, step: int):
        """What the chosen proxy calls jax's function through at ``step`` (a step at or past ``next_step``): the
        keeping call for the step before a sample, the measuring one for the sample."""
        if step + 1 == self.next_step:
            self.due_at = self.next_step
            return self.keep
        self.next_step = step + EVERY
        self.due_at = self.next_step - 1
        return functools.partial(self.measure, step)

    def keep(self, jitted, args, kwargs):
        out = jitted(*args, **kwargs)
        try:
            self._kept = self._one_output(out)
        except Exception:
            self._kept = None
        return out

    def measure(self, step: int, jitted, args, kwargs):
        kept, self._kept = self._kept, None
        started_ns = perf_counter_ns()
        queued_ns = None
        if kept is not None:
            try:
                if kept.is_ready():
                    queued_ns = 0
                else:
                    kept.block_until_ready()
                    queued_ns = perf_counter_ns() - started_ns
            except Exception:
                queued_ns = None
        del kept  # before the call: it may donate this buffer
        started_ns = perf_counter_ns()
        out = jitted(*args, **kwargs)
        dispatched_ns = perf_counter_ns()
        ready_ns = None
        if queued_ns is not None:
            try:
                leaf = self._one_output(out)
                if leaf is not None:
                    leaf.block_until_ready()
                    ready_ns = perf_counter_ns() - started_ns
            except Exception:
                ready_ns = None
        self.samples[step] = (dispatched_ns - started_ns, ready_ns, queued_ns)
        return out

    def _one_output(self, out):
        """One array among ``out``'s outputs: the last leaf (outputs of one call are ready together)."""
        x = out
        for _ in range(MAX_DEPTH):
            if isinstance(x, (tuple, list)) and x:
                x = x[-1]
            elif isinstance(x, dict) and x:
                x = x[next(reversed(x))]
            else:
                break
        if hasattr(x, "is_ready") and hasattr(x, "block_until_ready"):
            return x
        leaves = self._tree_leaves(out) if self._tree_leaves is not None else []
        for leaf in reversed(leaves):
            if hasattr(leaf, "is_ready") and hasattr(leaf, "block_until_ready"):
                return leaf
        return None
