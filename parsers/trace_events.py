"""A piece of trace events decoded by msgspec into typed structs that hold only what gpudiag reads.

orjson builds a dict for every event and every ``args``: a 1 GB Kineto trace has ~4 M events,
and building their dicts is most of the cost of reading it. msgspec decodes straight into
:class:`Event` structs with only the fields the tables need, skipping the rest of each event
(kernel launch geometry, op shapes and types) without building it: 0.26 s per 100 MB of the
grown trace against 0.53 s for orjson with the garbage collector off (1.4 s with it on).

The types are strict. A piece in which any kept field has a type real traces do not write (a
bool ``ts``, an array ``name``, ``args`` that is not an object, an event that is not an object)
is not decoded here: :func:`decode_events` returns None and the caller reads that piece with
orjson into dicts as before, so odd input is treated as it always was. Only well-typed pieces
take this path, and the values it keeps are the values orjson would give.
"""

from __future__ import annotations

try:  # msgspec is a dependency; without it every piece is read with orjson (the same tables, slower)
    import msgspec
except ImportError:  # pragma: no cover - exercised where msgspec is missing
    msgspec = None

READER = "msgspec (typed structs)" if msgspec is not None else "orjson (dicts)"
UNSET = msgspec.UNSET if msgspec is not None else object()  # an arg key the event does not have

if msgspec is not None:
    Scalar = int | float | str | None  # what an id or size in args may be; text is "not a number" later
    Kept = msgspec.UnsetType | int | float | str | None  # an arg whose presence matters (collective metadata)

    def _arg(key: str, default=None):
        return msgspec.field(default=default, name=key)

    class Args(msgspec.Struct, gc=False):
        """The ``args`` keys gpudiag reads; absent keys are None (UNSET where presence matters)."""

        device: Scalar = None
        stream: Scalar = None
        correlation: Scalar = None
        external_id: Scalar = _arg("External id")
        sequence_number: Scalar = _arg("Sequence number")
        bytes: Scalar = None
        python_id: Scalar = _arg("Python id")
        python_parent_id: Scalar = _arg("Python parent id")
        correlation_id: Scalar = None  # XLA's perfetto traces (text)
        cuda_sync_kind: str | None = None
        wait_on_stream: Scalar = None
        name: Kept = UNSET  # metadata events (process_name, thread_name)
        collective_name: Kept = _arg("Collective name", UNSET)
        pg_name: Kept = _arg("Process Group Name", UNSET)
        pg_ranks: Kept = _arg("Process Group Ranks", UNSET)
        group_size: Kept = _arg("Group size", UNSET)
        in_nelems: Kept = _arg("In msg nelems", UNSET)
        out_nelems: Kept = _arg("Out msg nelems", UNSET)
        dtype: Kept = UNSET
        seq: Kept = _arg("Seq", UNSET)

    class Event(msgspec.Struct, gc=False):
        """One chrome-trace event: the keys gpudiag reads, None where absent."""

        ph: str | None = None
        cat: str | None = None
        name: str | None = None
        pid: int | str | None = None
        tid: int | str | None = None
        ts: float | None = None
        dur: float | None = None
        id: int | str | None = None
        args: Args | None = None

    EMPTY_ARGS = Args()
    _DECODER = msgspec.json.Decoder(list[Event])
else:  # pragma: no cover - exercised where msgspec is missing
    EMPTY_ARGS = None


class EventPiece(list):
    """A list of :class:`Event` structs (so a reader can tell it from orjson's list of dicts)."""


def decode_events(raw: bytes) -> EventPiece | None:
    """The events of the JSON array ``raw`` as structs, or None when msgspec cannot (or should not) take it.

    None for anything: invalid JSON, a field of an unexpected type, nesting past the parser's own
    recursion limit. The caller then reads ``raw`` with orjson, which gives the old behaviour and errors.
    """
    if msgspec is None:
        return None
    try:
        return EventPiece(_DECODER.decode(raw))
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError, OverflowError):
        return None


def to_dict(e: Event) -> dict:
    """A metadata event as orjson would give it (only the keys the metadata reader looks at)."""
    out = {"ph": e.ph, "name": e.name, "pid": e.pid, "tid": e.tid}
    if e.args is not None:
        out["args"] = {} if e.args.name is UNSET else {"name": e.args.name}
    return out
