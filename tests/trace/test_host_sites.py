"""Issue 31 (2): the Python code the host ran while the GPU waited for it, from traces with Python stacks (H200
captures): the user's frame and the library call under it, gpudiag's own frames passed through."""

from __future__ import annotations

import diagnose
from diagnose.derive import trace_timeline as tl
from diagnose.derive.host_sites import host_sites
from diagnose.derive.trace_view import TraceView
from diagnose.thresholds import Thresholds
from tests.paths import FIXTURES, shared


def sites(path) -> dict[tuple[str, str | None], float]:
    th = Thresholds()
    trace = tl.analysed(TraceView(diagnose.load(path).traces[0]))
    table = host_sites(trace, tl.gaps(trace, th.sync.kernel_gap_us * 1e3, th.sync.sync_slack_us * 1e3))
    assert table.attrs["read_share"] == 1.0 and abs(table["share"].sum() - 1.0) < 1e-9
    return {
        (r.user_site, r.library_site if isinstance(r.library_site, str) else None): round(100 * r.share)
        for r in table.itertuples()
    }


def test_the_launch_bound_mlp_waits_on_issuing_its_backward():
    """fixtures/runs/torchrun_mlp: a small MLP whose step is launch-bound; gpudiag's backward wrapper
    (diagnose/launch/runtime/steps.py) is not named, the torch call the user made is. The step boundary that
    gpudiag's optimizer hook runs inside torch's optimizer wrapper() is gpudiag's own work: 5 % of the idle read,
    left out of the shares (with it, the wrapper read 15 % and the backward 63 %)."""
    got = sites(FIXTURES / "runs" / "torchrun_mlp")
    assert got[("train() in train_mlp.py:75", "backward() in torch/_tensor.py")] == 67
    # torch's wrapper() around every optimizer's step() is named as the step the user called
    assert got[("train() in train_mlp.py:75", "the optimizer's step() in torch/optim/optimizer.py")] == 13
    assert got[("train() in train_mlp.py:75", "the forward of Sequential_0")] == 11
    assert not any("diagnose/launch" in (lib or "") or "diagnose/launch" in user for user, lib in got)


def test_a_module_level_loop_and_the_autograd_thread():
    """fixtures/shared/torch (someone else's convnet trace): the backward's kernels are launched by the autograd
    engine's thread, which runs no Python; the sites come from the main thread, a module-level loop."""
    got = sites(shared("torch", "convnet.trace.json.gz"))
    assert got[("the module-level code of starter_torch.py", "the forward of Sequential_0")] == 62
    assert got[("the module-level code of starter_torch.py", "backward() in torch/_tensor.py")] == 30


def test_the_idle_finding_names_them():
    a = diagnose.analyze(diagnose.load(FIXTURES / "runs" / "torchrun_mlp"))
    f = next(f for f in a.findings if f.id == "idle.gpu_idle")
    assert (
        "While the GPU waited, the host was in (traced steps, share of that idle): train() in train_mlp.py:75, "
        "inside backward() in torch/_tensor.py (67 %)" in f.recommendation
    )
    assert "(gpudiag's own work in the trace window, 5 % of the idle read, is left out of these shares)" in (
        f.recommendation
    )
    locations = [s for s in f.subjects if s.kind == "location"]
    assert locations[0].name == "train() in train_mlp.py:75, inside backward() in torch/_tensor.py"
    assert round(locations[0].figures["host_idle_share"], 2) == 0.67


def test_a_site_under_backward_or_step_takes_the_line_light_mode_recorded():
    """called_at: light mode's phase-site records (the user's lines that call backward() and step()) put the line
    into a site's user part where the trace names only a function, or a module-level loop's file alone."""
    from diagnose.derive.host_sites import called_at

    sites = (
        ("backward", "/home/u/train.py:88", "<module>", None),
        ("optimizer", "/home/u/train.py:57", "train", None),
        ("optimizer", "/home/u/train.py:63", "train", None),
    )
    module, backward = "train.py(120): <module>", "torch/_tensor.py(576): backward"
    assert called_at("the module-level code of train.py", module, backward, sites) == "train.py:88 (module-level code)"
    wrapper = "torch/optim/optimizer.py(512): wrapper"
    assert called_at("train() in train.py:40", "train.py(40): train", wrapper, sites) == "train.py:57, 63 in train()"
    # a call light mode does not time, another file, another function: the trace's words unchanged
    zero_grad = "torch/optim/optimizer.py(1027): zero_grad"
    assert called_at("train() in train.py:40", "train.py(40): train", zero_grad, sites) == "train() in train.py:40"
    assert called_at("the module-level code of eval.py", "eval.py(9): <module>", backward, sites) == (
        "the module-level code of eval.py"
    )
    assert called_at("step() in train.py:30", "train.py(30): step", backward, sites) == "step() in train.py:30"
    assert called_at("train() in train.py:40", "train.py(40): train", None, sites) == "train() in train.py:40"
