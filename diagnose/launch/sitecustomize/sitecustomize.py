"""gpudiag's entry into the profiled Python process (this folder is put first on PYTHONPATH).

Python's ``site`` imports the first ``sitecustomize`` on the path: this one. It takes its
folder back off ``sys.path`` (the script sees the path plain ``python`` gives it), runs
the user's own ``sitecustomize`` if there is one further down the path, then starts the
bootstrap (the runtime package, diagnose/launch/runtime/) when ``GPUDIAG_RUN_DIR`` is set.
The package is registered from its file under its dotted name, so the child imports neither
the ``diagnose`` package nor anything outside the standard library (runtime/__init__.py says
how its modules then import each other). Nothing here may raise: an error prints one line and
the script runs uninstrumented.
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
    import importlib
    import importlib.util

    name = "diagnose.launch.runtime"
    if name not in sys.modules:
        folder = os.path.join(os.path.dirname(_HERE), "runtime")
        spec = importlib.util.spec_from_file_location(
            name, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
        )
        package = importlib.util.module_from_spec(spec)
        sys.modules[name] = package
        try:
            spec.loader.exec_module(package)
        except BaseException:
            del sys.modules[name]
            raise
    importlib.import_module(f"{name}.lifecycle").install_from_env()


try:
    _remove_own_folder()
    _run_user_sitecustomize()
    _start_bootstrap()
except Exception as _error:  # never stop the user's script
    sys.stderr.write(
        f"gpudiag: bootstrap not started ({type(_error).__name__}: {_error}); the script runs without instrumentation\n"
    )
