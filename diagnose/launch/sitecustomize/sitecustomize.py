"""gpudiag's entry into the profiled Python process (this folder is put first on PYTHONPATH).

Python's ``site`` imports the first ``sitecustomize`` on the path: this one. It takes its
folder back off ``sys.path`` (the script sees the path plain ``python`` gives it), runs
the user's own ``sitecustomize`` if there is one further down the path, then starts the
bootstrap when ``GPUDIAG_RUN_DIR`` is set. The bootstrap is loaded from its file, so the
child imports neither the ``diagnose`` package nor anything outside the standard library.
Nothing here may raise: an error prints one line and the script runs uninstrumented.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _remove_own_folder():
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]


def _run_user_sitecustomize():
    import importlib
    import traceback

    ours = sys.modules.pop("sitecustomize", None)
    try:
        importlib.import_module("sitecustomize")
    except ImportError as e:
        if getattr(e, "name", None) != "sitecustomize":
            traceback.print_exc()
    except Exception:
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n")
        traceback.print_exc()
    finally:
        if sys.modules.get("sitecustomize") is None and ours is not None:
            sys.modules["sitecustomize"] = ours  # no user sitecustomize: keep ours, as site would


def _start_bootstrap():
    if not os.environ.get("GPUDIAG_RUN_DIR") or os.environ.get("GPUDIAG_DISABLE") == "1":
        return
    import importlib.util

    name = "diagnose.launch.bootstrap_runtime"
    module = sys.modules.get(name)
    if module is None:
        path = os.path.join(os.path.dirname(_HERE), "bootstrap_runtime.py")
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    module.install_from_env()


try:
    _remove_own_folder()
    _run_user_sitecustomize()
    _start_bootstrap()
except Exception as _error:  # never stop the user's script
    sys.stderr.write(f"gpudiag: bootstrap not started ({type(_error).__name__}: {_error}); "
                     "the script runs without instrumentation\n")
