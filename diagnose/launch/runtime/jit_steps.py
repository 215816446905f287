"""Steps of a JAX script without a marker: the jitted function it dispatches once per iteration.

XProf infers steps from a trace without step markers the same way: from the most frequently
executed XLA program. Here it is done live. When the script imports jax, ``jax.jit`` is wrapped;
a function jitted from outside jax itself (the script, or a library such as flax or optax) comes
back as a thin proxy that counts its calls and otherwise forwards everything (``lower``,
``eval_shape``, attributes, binding as a method) to jax's own jitted function.

After ``CHOOSE_AFTER_CALLS`` calls to such functions, the step function is chosen: among those
called at least twice, the one called least often, earliest first on a tie. A helper jitted and
called several times per iteration is not the step, and a function called once (init) is not a
candidate. From then on the start of each call to it is a step boundary (``source: "jit"``);
the calls before the choice are warm-up (compilation) and make no steps. A ``diagnose.step()``
marker, when the script has one, takes precedence.

Once the choice is made, each proxy's call is only what it needs (``_set_call``): the chosen one's runs
``Steps.on_jit_step`` and then jax's function, in one Python frame; the others' calls are jax's function
itself, with no Python frame of ours: a helper's call cost 0.5 µs more than jax's in a tight loop and 1.2-2.1 µs
between the dispatches of a 0.3 ms step when it went through CountedJit's ``__call__``, 0.07 and 0.5 µs so (the
2-core CPU host, 2026-12). A function jitted after the choice can never be the step: jax's own function comes
back. When the runtime unhooks, every proxy forwards so.
"""

from __future__ import annotations

import functools
import sys
import types
import weakref

from diagnose.launch.runtime.sync_capture import user_stack

CHOOSE_AFTER_CALLS = 8


class JitStepFinder:
    """Wraps ``jax.jit`` for one Runtime and turns calls of the chosen step function into boundaries."""

    def __init__(self, steps):
        self._steps = steps
        self._counts: list[int] = []  # calls per wrapped function, by the order they were jitted
        self._first_call: list[int] = []  # the order in which each was first called (-1: never)
        self._calls = 0
        self._chosen: int | None = None  # index of the step function
        self._proxies: list[weakref.ref] = []  # the CountedJit of each wrapped function, by index
        self.chosen_name = ""
        self._names: list[str] = []
        self._where: dict[int, str | None] = {}  # the user's line of each function's last counted call
        self._jax = None
        self._original = None
        self._trace_state_clean = None  # jax's own "not tracing now" test, where this jax has one

    def hook(self, jax) -> None:
        original = getattr(jax, "jit", None)
        if original is None or self._original is not None:
            return
        finder = self

        def jit(*args, **kwargs):
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if not args and "fun" not in kwargs:  # jax.jit(static_argnums=...) as a decorator factory
                return lambda fun: finder.wrap(original(fun, **kwargs), fun, caller)
            return finder.wrap(original(*args, **kwargs), args[0] if args else kwargs["fun"], caller)

        jit.__doc__ = getattr(original, "__doc__", None)
        jit.__wrapped__ = original
        self._jax, self._original = jax, original
        self._trace_state_clean = _trace_state_clean()
        jax.jit = jit

    @property
    def chosen(self) -> int | None:
        """Index of the step function (None: not chosen yet; an index no proxy has: no boundaries)."""
        return self._chosen

    @chosen.setter
    def chosen(self, index: int | None) -> None:
        self._chosen = index
        for i, ref in enumerate(self._proxies):
            proxy = ref()
            if proxy is not None:
                _set_call(proxy, self._hook_for(i))

    def _hook_for(self, index: int):
        """What a call of proxy ``index`` runs before jax's function: counting until the choice, then the boundary
        for the chosen one and nothing for the rest."""
        if self._chosen is None:
            return functools.partial(self.on_call, index)
        return self._steps.on_jit_step if index == self._chosen else None

    def unhook(self) -> None:
        """Put jax.jit back; the script may go on calling the proxies it holds: they forward to jax, nothing more."""
        jax, original = self._jax, self._original
        self._jax = self._original = None
        if jax is not None and getattr(jax.jit, "__wrapped__", None) is original:
            jax.jit = original
        for ref in self._proxies:
            proxy = ref()
            if proxy is not None:
                _set_call(proxy, None)

    def wrap(self, jitted, fun, caller: str):
        """The proxy for a function jitted from ``caller``'s module; jax's own jits are left alone."""
        if caller == "jax" or caller.startswith(("jax.", "jaxlib")) or not callable(jitted):
            return jitted
        if self._chosen is not None:  # chosen already: this one is never the step
            return jitted
        self._counts.append(0)
        self._first_call.append(-1)
        self._names.append(getattr(fun, "__qualname__", None) or getattr(fun, "__name__", None) or repr(fun))
        index = len(self._counts) - 1
        proxy = CountedJit(jitted, self, index)
        self._proxies.append(weakref.ref(proxy))
        _set_call(proxy, self._hook_for(index))
        return proxy

    def on_call(self, index: int) -> None:
        chosen = self.chosen
        if chosen is not None:
            if index == chosen:
                self._steps.on_jit_step()
            return
        clean = self._trace_state_clean
        if clean is not None and not clean():  # called while another function is traced: part of that one
            return
        counts = self._counts
        self._where[index] = _caller_line(sys._getframe(2))  # on_call ← the proxy's __call__ ← the caller
        if counts[index] == 0:
            self._first_call[index] = self._calls
        counts[index] += 1
        self._calls += 1
        if self._calls >= CHOOSE_AFTER_CALLS:
            candidates = [i for i, n in enumerate(counts) if n >= 2]
            if candidates:
                self.chosen = min(candidates, key=lambda i: (counts[i], self._first_call[i]))
                self.chosen_name = self._names[self.chosen]
                self._tell_choice()
                if index == self.chosen:
                    self._steps.on_jit_step()

    def _tell_choice(self) -> None:
        """The step function chosen, once: its name and the user's line that last called it (the loop's line; a
        trace of a module-level loop holds no frame of it)."""
        try:
            self._steps.on_jit_chosen(self.chosen_name, self._where.get(self._chosen))
        except Exception:
            pass  # never in the way of the script's call


def _caller_line(frame) -> str | None:
    """``file:line`` of the innermost user frame from ``frame`` outwards (the first calls only: 8 a run)."""
    stack = user_stack(frame)
    return f"{stack[0][0]}:{stack[0][1]}" if stack else None


def _trace_state_clean():
    """jax's test for "no function is being traced now" (``jax._src.core.trace_state_clean``, in jax since 0.2), or
    None where this jax has none: then nested calls count as the others do."""
    try:
        from jax._src import core
    except ImportError:
        return None
    clean = getattr(core, "trace_state_clean", None)
    return clean if callable(clean) else None


class CountedJit:
    """A jitted function that tells the finder each time it is called; everything else is jax's.

    ``_hook`` is what a call runs before jax's function, set by the finder (``_set_call``): its ``on_call`` for this
    index until the step function is chosen, then ``Steps.on_jit_step`` for the chosen one and None for the others.
    From the choice on, each proxy's class is its own subclass whose ``__call__`` is just that."""

    __slots__ = ("_jitted", "_finder", "_index", "_hook", "__weakref__")

    def __init__(self, jitted, finder: JitStepFinder, index: int):
        self._jitted, self._finder, self._index = jitted, finder, index
        self._hook = None

    def __call__(self, *args, **kwargs):  # until the choice (and without a hook: forwarding)
        hook = self._hook
        if hook is not None:
            try:
                hook()
            except Exception:  # never in the way of the script's own call
                pass
        return self._jitted(*args, **kwargs)

    def __get__(self, obj, objtype=None):  # a jitted method binds like jax's own
        return self if obj is None else types.MethodType(self, obj)

    def __getattr__(self, name):
        return getattr(self._jitted, name)

    @property
    def __wrapped__(self):
        return getattr(self._jitted, "__wrapped__", self._jitted)

    def __repr__(self):
        return repr(self._jitted)


def _set_call(proxy: CountedJit, hook) -> None:
    """Make ``proxy``'s call run ``hook`` (a finder's ``on_call``, ``Steps.on_jit_step`` or None) before jax's function.

    Counting keeps CountedJit's own ``__call__``. Otherwise the proxy gets a class of its own (``__class__``
    assignment: the same slots) whose ``__call__`` is jax's function itself (a staticmethod: calling the proxy is
    a call of jax's C++ function, with no Python frame of ours), or one closure that runs the boundary and then
    jax's function, with nothing read from the proxy: directly, or in the steps jit_dispatch samples through the
    timed call the boundary returns. Only proxies alive at the choice get one (a few a run)."""
    proxy._hook = hook
    if isinstance(hook, functools.partial):
        proxy.__class__ = CountedJit
        return
    jitted = proxy._jitted
    if hook is None:
        call = staticmethod(jitted)
    else:

        def call(_proxy, *args, **kwargs):
            through = None
            try:
                through = hook()  # None, or in a sampled step jit_dispatch's timed call
            except Exception:  # never in the way of the script's own call
                pass
            if through is None:
                return jitted(*args, **kwargs)
            return through(jitted, args, kwargs)

    proxy.__class__ = type("CountedJit", (CountedJit,), {"__slots__": (), "__call__": call, "__module__": __name__})
