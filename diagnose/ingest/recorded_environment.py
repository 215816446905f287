"""What a run ran on: GPU, NVIDIA driver, CUDA and framework versions, from whatever the inputs record.

``gpudiag diff`` warns when A and B differ in any of these (docs/diff.md): another GPU or driver
moves every timing and counter, so "better" or "worse" between them says little about the code.
Where each comes from: the run folder's manifest first; for a bare trace, Kineto's header
(``cuda_driver_version``, ``cuda_runtime_version``) and ``deviceProperties``, or an Nsight Systems
export's ``TARGET_INFO_SYSTEM_ENV``; for an ncu export, its device-name column (``Profile.gpu_name``).
An input that does not record a field leaves it out: only fields both runs know are compared.
"""

from __future__ import annotations

from typing import Any

# field -> what a person reads
FIELDS = {
    "gpu": "GPU",
    "driver": "NVIDIA driver",
    "cuda_driver": "CUDA version of the driver",
    "cuda_runtime": "CUDA runtime",
    "torch": "torch",
    "jax": "JAX",
}


def environment_of(profile) -> dict[str, str]:
    """The fields of ``FIELDS`` this profile records, as strings (CUDA as ``major.minor``)."""
    env: dict[str, str] = {}
    if profile.gpu_name:
        env["gpu"] = str(profile.gpu_name)
    m = profile.manifest or {}
    _put(env, "driver", m.get("driver_version"))
    _put(env, "cuda_driver", cuda_version(m.get("cuda_driver_version")))
    versions = m.get("versions") or {}
    _put(env, "cuda_runtime", cuda_version(versions.get("torch_cuda")))
    used = " ".join(str(v) for v in (m.get("frameworks") or {}).values())
    for framework in ("torch", "jax"):
        if not used or framework in used:  # a version of a framework the run did not use says nothing
            _put(env, framework, versions.get(framework))
    for rank in sorted(profile.traces):
        trace = profile.trace_header(rank) if hasattr(profile, "trace_header") else profile.traces[rank]
        meta = getattr(trace, "metadata", None) or {}
        header = meta.get("header") or {}
        _put(env, "driver", meta.get("driver_version"))  # Nsight Systems
        _put(env, "cuda_driver", cuda_version(header.get("cuda_driver_version") or meta.get("cuda_driver_version")))
        _put(env, "cuda_runtime", cuda_version(header.get("cuda_runtime_version")))
    return env


def mismatches(env_a: dict[str, str], env_b: dict[str, str]) -> list[str]:
    """One sentence per field both know and that differs, GPU first."""
    out = []
    for field, label in FIELDS.items():
        a, b = env_a.get(field), env_b.get(field)
        if a is None or b is None or a == b:
            continue
        what = "different GPUs" if field == "gpu" else f"a different {label}"
        out.append(
            f"A and B ran on {what}: {a} (A) vs {b} (B); timings and counters are not comparable across "
            "them, so better/worse below may reflect the environment, not the code"
        )
    return out


def cuda_version(value: Any) -> str | None:
    """``13000`` / ``"13020"`` (CUDA's integer form) or ``"13.0"`` → ``"13.0"`` / ``"13.2"``; None if unknown."""
    if value is None or isinstance(value, bool):
        return None
    text = str(value).strip()
    if text.isdigit() and len(text) >= 4:
        number = int(text)
        return f"{number // 1000}.{(number % 1000) // 10}"
    return text or None


def _put(env: dict[str, str], field: str, value: Any) -> None:
    if field not in env and value not in (None, ""):
        env[field] = str(value)
