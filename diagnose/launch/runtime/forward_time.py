"""The host time of each step's forward pass: the outermost ``nn.Module`` calls on the main thread (issue 31).

The step's host phases were input, backward and optimizer, and "forward, loss and the rest" for what was left; a
user deciding between torch.compile, CUDA graphs and a faster batch function needs the forward alone. A module call
at depth 0 (no other module's forward running on the main thread) is the model's forward, or a loss module called
by the loop; its host time is the forward's.

Global module hooks (``register_module_forward_pre_hook`` / ``register_module_forward_hook``) run for every module
call, hundreds a step: they are used from the first step boundary for ``LEARN_STEPS`` boundaries only, to learn
which modules are called at depth 0 (the roots). Then hooks on those modules alone time one step in
``TIMED_EVERY``: they go on at the boundary that starts a timed step and off at the one that ends it. A module with
hooks of its own takes torch's slow call path (about 9 µs a step on the 2-core CPU host, half of light mode's cost
on a 160 µs step, benchmarks/light_step_pieces.py); one step in ``TIMED_EVERY`` pays it, and the others pay a
comparison at their boundary. The step boundary times the backward and optimizer phases in these same steps once an
optimizer or a marker defines the steps (runtime/steps.py, ``_open_phases``): the slow step is one step, not three.
The phases of the median step read the forward's share from the timed steps (diagnose/derive/host_phases.py). A loop whose roots change every step (more than ``MAX_ROOTS`` seen) keeps no
hooks at all: its forward is not measured.
Post hooks are registered with ``always_call``, so a forward that raises still closes its span. Inside a
torch.compile region the hooks return at once on ``torch.compiler.is_dynamo_compiling()``, which dynamo folds to a
constant: otherwise dynamo traced them, broke the graph at their clock reads and compiled the hooks as frames of their
own.
"""

from __future__ import annotations

import threading
from threading import get_ident
from time import perf_counter_ns

LEARN_STEPS = 3  # boundaries with the global hooks on, learning the root modules
# once learned, the roots' hooks time one step in this many. 8 until 2026-12-06: each timed step is a slow one among
# those the median step is read from; with the phases in the same steps, light mode's median cost on
# examples/train_mlp.py's model (0.71 ms steps, 2-core CPU host, benchmarks/light_overhead_interleaved.py, two runs
# back to back) read +2.18 % at 8 and +1.97 % at 16
TIMED_EVERY = 16


def _not_compiling() -> bool:
    return False


_is_compiling = _not_compiling  # torch.compiler.is_dynamo_compiling (or is_compiling) once hooked
MAX_ROOTS = 8  # more distinct roots than this: not a model's forward, no timing


class ForwardTime:
    """Host ns spent in depth-0 module calls on the main thread since the last step boundary (``ns``).

    Once the roots are learned (``settled``) the step boundary reads plain attributes: ``timing`` (the step that
    ends was timed: it takes ``ns`` and calls :meth:`stop_timing`) and ``next_timed`` (the step that starts is to be
    timed: :meth:`start_timing`); before that it calls :meth:`on_boundary`."""

    def __init__(self, main_thread: int | None = None):
        self._main = main_thread if main_thread is not None else threading.main_thread().ident
        self._depth = 0
        self._started_ns = 0
        self.ns = 0  # host ns in depth-0 calls since the boundary last took them
        self.timing = False  # hooks on (the global ones while learning, or the roots'): forward calls are timed
        self.settled = False  # learning is over (the roots carry the hooks, or none are left): boundaries take ``ns``
        self._roots: dict[int, object] = {}  # id → module, learned while the global hooks are on
        self._handles: list = []
        self._boundaries = 0
        self.learning = False
        self._hooked_roots: list = []  # the roots that carry the hooks once learned (for pause/resume)
        self._register = (None, None)
        self._started = False
        self.next_timed = 0  # the first step (number) the roots' hooks time; a large number while paused
        self._paused = False
        self._next_timed_paused = 0
        self._reused: list | None = None  # the roots' hooks once registered (None: not yet)

    def hook(self, torch) -> bool:
        """Ready to learn the roots from the first step boundary on; False where this torch has no global module
        hooks. The global hooks go in at that boundary, not now: a script's torch.compile(model), made before its
        loop, would warn about global hooks on modules."""
        module = getattr(getattr(getattr(torch, "nn", None), "modules", None), "module", None)
        self._register = (
            getattr(module, "register_module_forward_pre_hook", None),
            getattr(module, "register_module_forward_hook", None),
        )
        if None in self._register:
            return False
        global _is_compiling
        compiler = getattr(torch, "compiler", None)
        # is_dynamo_compiling, where torch has it, is a plain `return False` outside dynamo (18 ns a call on the
        # 2-core CPU host, against 51 for is_compiling, which asks torch.jit first); dynamo folds both to True
        _is_compiling = (
            getattr(compiler, "is_dynamo_compiling", None) or getattr(compiler, "is_compiling", None) or _not_compiling
        )
        return True

    def _set_handles(self, handles: list) -> None:
        self._handles = handles
        self.timing = bool(handles)

    def _start_learning(self) -> None:
        pre, post = self._register
        self._set_handles([pre(self._pre_learning), _post_hook(post, self._post)])
        self.learning = True

    def unhook(self) -> None:
        self._remove_handles()
        for hook in self._reused or ():
            hook.off()
        self._reused = None
        self.timing = False
        self._hooked_roots = []
        self.learning = False
        self._roots.clear()

    def _remove_handles(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._set_handles([])

    def _pre_learning(self, module, args) -> None:
        if _is_compiling() or get_ident() != self._main:
            return
        if self._depth == 0:
            self._started_ns = perf_counter_ns()
            if len(self._roots) <= MAX_ROOTS:
                self._roots[id(module)] = module
        self._depth += 1

    # _pre and _post run at every root module call (the model's, the loss's): a few attribute reads each
    def _pre(self, module, args) -> None:
        if _is_compiling() or get_ident() != self._main:
            return
        depth = self._depth
        if not depth:
            self._started_ns = perf_counter_ns()
        self._depth = depth + 1

    def _post(self, module, args, output) -> None:
        if _is_compiling() or get_ident() != self._main:
            return
        depth = self._depth
        if depth == 1:
            self.ns += perf_counter_ns() - self._started_ns
        if depth:
            self._depth = depth - 1

    def take_ns(self) -> int:
        """The forward ns since the last call (the step that ends here), and zero for the next."""
        ns, self.ns = self.ns, 0
        return ns

    def on_boundary(self) -> int | None:
        """The forward ns of the step that ends here (None while no hooks time it), and zero for the next. At the
        first boundary the global hooks go in; ``LEARN_STEPS`` boundaries later they give way to hooks on the
        roots they saw, and ``settled`` turns True."""
        ns = self.take_ns() if self.timing else None  # before the hooks change below: what timed the step that ended
        self.ns = 0
        if not self._started:
            self._started = True
            self._start_learning()
        elif self.learning:
            self._learn()
        return ns

    def _learn(self) -> None:
        self._boundaries += 1
        if self._boundaries < LEARN_STEPS or not self._roots or self._depth:
            return
        roots = list(self._roots.values())
        self._remove_handles()
        self.learning = False
        self.settled = True
        self._roots.clear()
        if len(roots) > MAX_ROOTS:
            return
        self._hooked_roots = roots  # hooked from the boundary that starts the next timed step (start_timing)

    def _hook_roots(self) -> None:
        handles = []
        for module in self._hooked_roots:
            handles.append(module.register_forward_pre_hook(self._pre))
            handles.append(_post_hook(module.register_forward_hook, self._post))
        self._set_handles(handles)

    def start_timing(self, step: int) -> None:
        """The boundary that starts step ``step`` (a timed one): the roots' hooks on, and the next timed step set.
        The first timed step registers them; later ones put the same entries back (ReusedHook)."""
        self.next_timed = step + TIMED_EVERY
        if not self._hooked_roots or self.timing:
            return
        self.ns = 0
        if self._reused is None:
            self._hook_roots()
            self._reused = [ReusedHook(handle) for handle in self._handles]
            return
        for hook in self._reused:
            hook.on()
        self.timing = True

    def stop_timing(self) -> None:
        """The boundary that ends a timed step, its ``ns`` taken: the roots' hooks off. Not inside a module call
        (a boundary in a forward): the hooks stay on and time the next step too."""
        if self._depth or not self._reused:
            return
        for hook in self._reused:
            hook.off()
        self.timing = False

    def pause(self) -> None:
        """The roots' hooks off and no step timed (the overhead benchmarks' plain arms); resume() times again, on the
        same schedule (a plain arm makes no steps: light's steps stay timed one in TIMED_EVERY)."""
        if not self.learning and not self._paused:
            self._depth = 0
            self.stop_timing()
            self._paused = True
            self._next_timed_paused, self.next_timed = self.next_timed, 1 << 62

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            self.next_timed = self._next_timed_paused


class ReusedHook:
    """A registered module hook that goes off and back on without torch's register call (a new RemovableHandle and
    its weak references, several µs a root on the 2-core CPU host, at every timed step): off is the handle's
    ``remove()``; on puts its entries back into the dicts the handle names (torch ≥ 2.1: the hook dict, and for a
    post hook the ``always_call`` one), as they were registered."""

    __slots__ = ("handle", "entries")

    def __init__(self, handle):
        self.handle = handle
        hook_id = handle.id
        self.entries = []
        for ref in (handle.hooks_dict_ref, *handle.extra_dict_ref):
            hooks = ref()
            if hooks is not None and hook_id in hooks:
                self.entries.append((hooks, hook_id, hooks[hook_id]))

    def on(self) -> None:
        for hooks, hook_id, value in self.entries:
            hooks[hook_id] = value

    def off(self) -> None:
        self.handle.remove()


def _post_hook(register, hook):
    """``register(hook, always_call=True)``: the span closes even when the forward raises (torch ≥ 2.0)."""
    try:
        return register(hook, always_call=True)
    except TypeError:
        return register(hook)
