"""Nsight Compute units → gpudiag's base units.

ncu prints human units by default (``usecond``/``us``, ``Kbyte``, ``Gbyte/s``,
``Ghz``, ``Kbyte/block``) and base units with ``--print-units base`` (``ns``,
``byte``, ``byte/s``, ``hz``). Both must give the same numbers and the same
column names, so every unit is parsed into (scale, canonical base unit): a
numerator and optional denominators, each an SI (or binary) prefix on a known
base. Times are ns in a numerator (durations) and seconds in a denominator (rates);
``cycle`` per time is a frequency, Hz. ncu's byte prefixes are decimal: ``1.024 Kbyte/block`` is
1024 bytes. A prefix on a *denominator* multiplies too, because that is what ncu's own base
conversion does (``5.3 %/Kbyte`` prints as ``5,300 %/byte`` with ``--print-units base``, in the
fixtures' raw pages); gpudiag reproduces ncu's base numbers rather than correcting them.
"""

from __future__ import annotations

import functools
import re

_SI = {"": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BIN = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
_SMALL = {"m": 1e-3, "u": 1e-6, "n": 1e-9, "µ": 1e-6}
# time as a numerator → ns
_TIME_NS = {
    "nsecond": 1.0,
    "ns": 1.0,
    "usecond": 1e3,
    "us": 1e3,
    "msecond": 1e6,
    "ms": 1e6,
    "second": 1e9,
    "s": 1e9,
    "sec": 1e9,
}
# time as a denominator → per second
_TIME_S = {k: v / 1e9 for k, v in _TIME_NS.items()}
_PREFIXED_BASES = {"byte": "byte", "hz": "Hz", "Hz": "Hz", "bit": "bit", "B": "byte"}


@functools.cache
def to_base(unit: str | None) -> tuple[float, str]:
    """(multiplier, base unit) for an ncu unit string; unknown units pass through with scale 1."""
    if unit is None:
        return 1.0, ""
    unit = unit.strip()
    if not unit:
        return 1.0, ""
    parts = unit.split("/")
    scale, num = _part(parts[0], numerator=True)
    names = [num]
    for den in parts[1:]:
        s, name = _part(den, numerator=False)
        # time denominators divide (Gbyte/s → byte/s); other prefixes multiply, as ncu does
        scale = scale / s if name == "s" else scale * s
        names.append(name)
    if names == ["cycle", "s"]:
        return scale, "Hz"
    return scale, "/".join(names)


def _part(text: str, numerator: bool) -> tuple[float, str]:
    text = text.strip()
    times = _TIME_NS if numerator else _TIME_S
    if text in times:
        return times[text], "ns" if numerator else "s"
    for base, canon in _PREFIXED_BASES.items():
        if text.endswith(base):
            prefix = text[: -len(base)]
            if prefix in _SI:
                return _SI[prefix], canon
            if prefix in _BIN:
                return _BIN[prefix], canon
            if prefix.lower() in ("k", "m", "g", "t") and base.lower() == "hz":
                return _SI[prefix.upper()], canon
            if prefix in _SMALL:
                return _SMALL[prefix], canon
    # inst, cycle, warp, block, sector, register, %, ... (ncu never prefixes these in CSVs we have seen)
    m = re.fullmatch(r"(K|M|G|T)(inst|cycle|warp|sector|request|thread)", text)
    if m:
        return _SI[m.group(1)], m.group(2)
    return 1.0, text


def column_name(metric: str, base_unit: str) -> str:
    """The column a raw metric lands in: ``"<metric> [<base unit>]"``, or the bare name when unitless."""
    return f"{metric} [{base_unit}]" if base_unit else metric
