"""Where the host was while the GPU waited for it: the Python code behind host-caused GPU idle (issue 31).

"GPU idle, waiting for the host to launch work" is a symptom; a user acts on the code the host was running. A
trace recorded with Python stacks (``with_stack=True``, which light mode's trace window uses) holds every Python
call on the launching thread with its start and end. For each host-caused gap of the GPU timeline, the time is
given to the innermost Python frame active on that thread at each moment, and named by the innermost user frame
over it (the user's code) and, when the innermost frame is a library's, the library call the user's frame made
(the library frame right under it: ``torch/_tensor.py: backward``, ``torch/optim/optimizer.py: wrapper``). Kineto
names a frame by its function and the function's first line, so a site is a function, not a line.

JAX's trace names a frame's file by its base name alone (``numeric.py``: numpy's or the user's?), so there the user's
frames are those of the run's own files (``user_files_of``: the script and the files light mode's records name).

Only the ``MAX_GAPS`` longest gaps are read (a 1 GB trace has hundreds of thousands of short ones); the result says
what share of the host-caused idle they hold.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pandas as pd

from diagnose.derive.trace_input_wait import script_args
from diagnose.formatting import share_human
from parsers.run_records import PHASE_BACKWARD, PHASE_OPTIMIZER

MAX_GAPS = 5000
COLUMNS = ["user_site", "library_site", "idle_ns", "share"]
# gpudiag's own frames (its wrappers of torch.autograd.backward and the optimizers) are neither the user's code nor
# the library call the user made: the walk passes through them
# and the warnings machinery inside the trace window, where gpudiag's sync debug mode makes torch warn at every sync
GPUDIAG_FRAMES = re.compile(r"(?:^|/)diagnose/(?:launch|derive|analyzers)/|(?:^|/)warnings\.py\(\d+\): _showwarnmsg")
OWN_WORK = "gpudiag's own work in the trace window"
NO_USER_FRAME = "(no user frame)"
OWN_SHARE_SAID = 0.05  # gpudiag's own share of the idle read at or above which the sites' words name it
# gpudiag's own modules by base name: a JAX trace names files so (its jit proxy's __call__ is jit_steps.py's)
_OWN_DIRS = [
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), d) for d in ("launch", "launch/runtime")
]
OWN_BASE_NAMES = frozenset(f for d in _OWN_DIRS if os.path.isdir(d) for f in os.listdir(d) if f.endswith(".py"))
# the proxy's call: CountedJit.__call__ until the step function is chosen, then the function _set_call gives its class
JIT_PROXY = re.compile(r"^jit_steps\.py\(\d+\): (?:__call__|call)$")
JIT_DISPATCH = "a jitted function's dispatch"
# the step boundary's own work and what it starts (the trace window's start and export, the snapshot, the step log):
# time under such a frame is gpudiag's, even under a frame that passes through to the script (the jit proxy calls
# the boundary before jax's function)
OWN_WORK_FRAME = re.compile(
    r"\): (?:on_jit_step|boundary|_boundary|_due|_after_step|on_optimizer_step|on_backward|marker|drain|open|close"
    r"|start|stop|stop_and_export|take_snapshot|maybe_stats)$"
)
# the optimizer step's frames in torch.optim: the profiling wrapper around every step(), or step() itself
OPTIMIZER_STEP_FUNCTIONS = ("wrapper", "step", "_use_grad")
BUILTIN_METHOD = re.compile(r"^<built-in method (\w+) of (\w+) object at 0x[0-9a-fA-F]+>$")
BUILTIN_FUNCTION = re.compile(r"^<built-in function (\w+)>$")


def user_files_of(profile) -> frozenset[str]:
    """Base names of the run's own Python files: the script in the manifest's command and every file light mode's
    work and sync records name as the user's (gpudiag's own files are not the user's)."""
    names = {os.path.basename(arg) for arg in script_args(getattr(profile, "manifest", None) or {})}
    for records in (getattr(profile, "work_records", {}) or {}, getattr(profile, "sync_records", {}) or {}):
        for frame in records.values():
            if frame is None or "location" not in frame:
                continue
            for location in frame["location"].dropna().unique():
                file = str(location).rpartition(":")[0]
                if file.endswith(".py") and not GPUDIAG_FRAMES.search(file) and "/diagnose/" not in file:
                    names.add(os.path.basename(file))
    return frozenset(names)


def host_sites(
    trace,
    gaps: pd.DataFrame,
    causes: tuple[str, ...] = ("host",),
    user_files: frozenset[str] = frozenset(),
    phase_sites: tuple = (),
) -> pd.DataFrame:
    """Per (user site, library site), the host-caused GPU idle the host spent there, largest first; ``share`` is of
    the idle read, on the Python thread that launches the most GPU work. ``attrs["read_share"]``: the share of the
    causes' idle in the gaps read. Empty without Python frames on the launching thread. ``user_files``: base names
    of the run's own files, which mark the user's frames in a JAX trace (user_files_of). ``phase_sites``: light
    mode's records of the lines that call backward() and the optimizer's step() (parsers.events.RunMarks), which
    put the line into a site under one of them (called_at)."""
    py = getattr(trace, "python", None)
    empty = pd.DataFrame(columns=COLUMNS)
    if py is None or not len(py) or not len(gaps) or not len(trace.runtime):
        return empty
    # the Python thread that launches the most GPU work (the autograd engine's own thread launches the backward's
    # kernels but runs no Python: the main thread waits inside backward() meanwhile)
    launches = trace.runtime["tid"].value_counts()
    python_tids = py["tid"].value_counts()
    tid = int(max(python_tids.index, key=lambda t: (launches.get(t, 0), python_tids[t])))
    on = py["tid"].to_numpy() == tid
    if not on.any():
        return empty
    mine = np.flatnonzero(on)
    starts = py["ts_ns"].to_numpy(dtype=np.int64)
    ends = py["end_ns"].to_numpy(dtype=np.int64)
    parents = py["parent_index"].to_numpy(dtype=np.int64)
    names = py["name"].astype("category")
    categories = names.cat.categories.astype(str)
    codes = names.cat.codes.to_numpy()
    ours_by_code = np.append(np.array([bool(GPUDIAG_FRAMES.search(c)) for c in categories], dtype=bool), False)
    ours = ours_by_code[codes]  # code -1 (no name): the last entry
    names = np.append(np.asarray(categories, dtype=object), None)[codes]
    is_user = py["is_user"].to_numpy(dtype=bool)
    if getattr(trace, "format", None) == "perfetto" and "file" in py:  # base names: the run's files, gpudiag's
        files = py["file"].astype("category")
        base = [os.path.basename(str(c)) for c in files.cat.categories]
        file_codes = files.cat.codes.to_numpy()
        is_user = np.append([b in user_files for b in base], False)[file_codes]
        ours = ours | np.append([b in OWN_BASE_NAMES and b not in user_files for b in base], False)[file_codes]
        # gpudiag's jit proxy forwards to jax's jitted function (its dispatch runs in C++, no frame under it): the
        # time in it is that dispatch's, named so
        proxy = np.asarray([isinstance(n, str) and JIT_PROXY.match(n) is not None for n in names], dtype=bool)
        ours = ours & ~proxy
        names = np.where(proxy, JIT_DISPATCH, names)
    is_user = is_user & ~ours
    work = ours & np.asarray([isinstance(n, str) and OWN_WORK_FRAME.search(n) is not None for n in names], dtype=bool)
    depth = _depths(parents)
    wanted = gaps[gaps["cause"].isin(causes)]
    total = float(wanted["dur_ns"].sum())
    if total <= 0:
        return empty
    read = wanted.nlargest(MAX_GAPS, "dur_ns")
    order = mine[np.argsort(starts[mine], kind="stable")]
    sorted_starts = starts[order]
    time_of: dict[int, float] = {}
    n = len(parents)
    for s, e in zip(read["start_ns"].to_numpy(dtype=np.int64), read["end_ns"].to_numpy(dtype=np.int64)):
        # frames nest on one thread: those active at the gap's start are the last frame begun before it, or its
        # ancestors; the others begin inside the gap. So a gap costs its depth and its own frames, never the whole table
        before = int(np.searchsorted(sorted_starts, s, side="right"))
        chain = []
        if before:
            j = int(order[before - 1])
            while 0 <= j < n and ends[j] <= s:
                j = int(parents[j])
            while 0 <= j < n:
                chain.append(j)
                j = int(parents[j])
        inside = order[before : int(np.searchsorted(sorted_starts, e, side="left"))]
        cands = np.concatenate([np.asarray(chain, dtype=np.int64), inside]) if chain else inside
        if not len(cands):
            continue
        cuts = np.unique(np.clip(np.concatenate([[s, e], starts[cands], ends[cands]]), s, e))
        for a, b in zip(cuts[:-1], cuts[1:]):
            mid = (a + b) // 2
            active = cands[(starts[cands] <= mid) & (ends[cands] > mid)]
            if len(active):
                frame = int(active[np.argmax(depth[active])])
                time_of[frame] = time_of.get(frame, 0.0) + float(b - a)
    if not time_of:
        return empty
    rows, raw = {}, {}
    for frame, ns in time_of.items():
        key, user_frame, library_frame = _site(frame, parents, is_user, ours, names, work)
        rows[key] = rows.get(key, 0.0) + ns
        raw.setdefault(key, (user_frame, library_frame))
    if phase_sites:  # a site under backward() or step(): the user's line that calls it, where light mode read it
        lines = {}
        for (user, library), ns in rows.items():
            key = (called_at(user, *raw[(user, library)], phase_sites), library)
            lines[key] = lines.get(key, 0.0) + ns
        rows = lines
    # gpudiag's own work (the window's start and export, its sync capture) is not the script's: left out, and how
    # much of the idle read it held said apart (a JAX step of 0.6 ms beside a 15 ms profiler start held 99 %)
    own_ns = sum(ns for (_, lib), ns in rows.items() if lib == OWN_WORK)
    rows = {key: ns for key, ns in rows.items() if key[1] != OWN_WORK}
    read_ns = sum(rows.values())
    if read_ns <= 0:
        return empty
    out = pd.DataFrame([(u, lib, ns, ns / read_ns) for (u, lib), ns in rows.items()], columns=COLUMNS).sort_values(
        "idle_ns", ascending=False, kind="stable"
    )
    out = out.reset_index(drop=True)
    out.attrs["read_share"] = float(read["dur_ns"].sum()) / total
    out.attrs["own_share"] = own_ns / (own_ns + read_ns)
    return out


def _depths(parents: np.ndarray) -> np.ndarray:
    """Each frame's depth (0 for a root), by passes over the whole array: one pass per level, not per frame."""
    n = len(parents)
    parent = np.where((parents >= 0) & (parents < n), parents, -1)
    depth = np.zeros(n, dtype=np.int64)
    has = parent >= 0
    for _ in range(n):
        new = np.where(has, depth[np.maximum(parent, 0)] + 1, 0)
        if np.array_equal(new, depth):
            break
        depth = new
    return depth


def _site(
    frame: int, parents: np.ndarray, is_user: np.ndarray, ours: np.ndarray, names: np.ndarray, work: np.ndarray
) -> tuple[tuple[str, str | None], str | None, str | None]:
    """((the innermost user frame over ``frame``, the library frame the user's frame called on the way to it, not
    gpudiag's own and not a frame without a name), in words; and the two frames' names as the trace gives them); the
    library part is OWN_WORK when a frame on the way is the boundary's own work (``work``) or the innermost frame that
    is not a built-in is gpudiag's."""
    child, j, decided, own = None, frame, False, False
    while j >= 0 and not is_user[j]:
        if not decided and (ours[j] or not str(names[j]).startswith("<built-in")):
            decided, own = True, bool(ours[j])  # the innermost frame that is not a built-in says whose work it is
        own = own or bool(work[j])
        if not ours[j] and isinstance(names[j], str):
            child = j
        j = parents[j] if 0 <= parents[j] < len(parents) else -1
    user_frame = names[j] if j >= 0 and isinstance(names[j], str) else None
    user = _words(user_frame, with_line=True) if user_frame is not None else NO_USER_FRAME
    if own:  # gpudiag's own work inside the trace window (its sync capture's warning handler, say)
        return (user, OWN_WORK), user_frame, None
    library_frame = names[child] if child is not None else None
    return (user, _words(library_frame) if library_frame is not None else None), user_frame, library_frame


def _frame_parts(name: str) -> tuple[str, str, str] | None:
    """``train.py(42): get_batch`` → ("train.py", "42", "get_batch"); None for a name of another form (a built-in,
    ``nn.Module: …``)."""
    head, sep, function = name.partition("): ")
    if not sep:
        return None
    file, _, line = head.rpartition("(")
    return file, line, function


def phase_of_library_frame(name: str | None) -> str | None:
    """The timed phase a library frame is the call of: ``torch/_tensor.py(625): backward`` → "backward", the
    optimizer's step (``torch/optim/optimizer.py(…): wrapper``, a GradScaler's step) → "optimizer"; else None."""
    parts = _frame_parts(name) if isinstance(name, str) else None
    if parts is None:
        return None
    file, _, function = parts
    file = file.replace("\\", "/")
    if function == "backward" and file.endswith(("torch/_tensor.py", "torch/autograd/__init__.py")):
        return PHASE_BACKWARD
    if (function in OPTIMIZER_STEP_FUNCTIONS and "torch/optim/" in file) or (
        function == "step" and file.endswith("grad_scaler.py")
    ):
        return PHASE_OPTIMIZER
    return None


def called_at(user: str, user_frame: str | None, library_frame: str | None, phase_sites: tuple) -> str:
    """``user`` (a site's user part in words) with the line that makes the call ``library_frame`` is, where light
    mode recorded it for the same file and function (``phase_sites``): "train.py:88 (module-level code)" for
    "the module-level code of train.py", "train.py:57 in train()" for "train() in train.py:40" (its first line).
    Several lines of one function that call it are all named; ``user`` unchanged where none is recorded."""
    phase = phase_of_library_frame(library_frame)
    parts = _frame_parts(user_frame) if phase is not None and isinstance(user_frame, str) else None
    if parts is None:
        return user
    file, _, function = parts
    file = os.path.basename(file)
    lines = []
    for site_phase, location, site_function, _ in phase_sites:
        site_file, _, line = str(location).rpartition(":")
        if site_phase == phase and site_function == function and os.path.basename(site_file) == file:
            if line not in lines:
                lines.append(line)
    if not lines:
        return user
    where = f"{file}:{', '.join(lines)}"
    return f"{where} (module-level code)" if function == "<module>" else f"{where} in {function}()"


def _words(name: str, with_line: bool = False) -> str:
    """``train.py(42): get_batch`` as ``get_batch() in train.py`` (``with_line``: ``get_batch() in train.py:42``, the
    function's first line, where the user's own code is named); ``<built-in method cpu of Tensor object at 0x…>``
    as ``Tensor.cpu()``; ``nn.Module: Sequential_0`` as ``the forward of Sequential_0``; torch's wrapper around
    every optimizer's step() (``torch/optim/optimizer.py(512): wrapper``) as ``the optimizer's step() in
    torch/optim/optimizer.py``: "wrapper()" names nothing the user wrote or called."""
    if m := BUILTIN_METHOD.match(name):
        return f"{m.group(2)}.{m.group(1)}()"
    if m := BUILTIN_FUNCTION.match(name):
        return f"{m.group(1)}()"
    if name.startswith("nn.Module: "):
        return f"the forward of {name.removeprefix('nn.Module: ')}"
    parts = _frame_parts(name)
    if parts is None:
        return name
    file, line, function = parts
    if function == "<module>":
        return f"the module-level code of {file}"
    if function == "wrapper" and phase_of_library_frame(name) == PHASE_OPTIMIZER:
        return f"the optimizer's step() in {file}"  # torch's wrapper around every optimizer's step()
    at = f"{file}:{line}" if with_line and line.isdigit() and int(line) > 0 else file
    return f"{function}() in {at}"


def site_words(user_site: str, library_site) -> str:
    """``main() in train.py, inside backward() in torch/_tensor.py``, or ``main() in train.py itself``."""
    return f"{user_site}, inside {library_site}" if isinstance(library_site, str) else f"{user_site} itself"


def sites_text(sites: pd.DataFrame, limit: int = 4) -> str:
    """``main() in train.py, inside the optimizer's step() in torch/optim/optimizer.py (31 %); …``, the largest
    first; where gpudiag's own work held part of the idle read, that part is named after them (left out of the
    shares)."""
    text = "; ".join(
        f"{site_words(r.user_site, r.library_site)} ({share_human(r.share, 0)})" for r in sites.head(limit).itertuples()
    )
    own = sites.attrs.get("own_share", 0.0)
    if own >= OWN_SHARE_SAID:
        text += f" ({OWN_WORK}, {share_human(own, 0)} of the idle read, is left out of these shares)"
    return text
