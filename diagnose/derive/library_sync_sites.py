"""Syncs that libraries make every step, and the setting that removes each: the fix a user can apply without
editing the library (issue 31 (b)).

When light mode's sync record names a library's line beside the user's (``library_location``: HF Trainer's loop
calls ``torch.isnan(loss)`` from the user's ``trainer.train()``), the generic advice ("keep the value on the GPU")
names code the user does not own. Each entry here was seen in a real capture, matched by the library's file and the
synchronising op, never by the line (it moves between versions):

* transformers/trainer.py, ``aten::is_nonzero``, twice a step: the Trainer filters NaN/inf losses on the host
  (``logging_nan_inf_filter``, on by default: ``torch.isnan(tr_loss_step) or torch.isinf(tr_loss_step)``).
* accelerate/utils/operations.py, ``aten::to``: ``send_to_device`` copies each batch to the GPU with a blocking copy.
* transformers/masking_utils.py, ``aten::is_nonzero``: building the attention mask, the model reads the padding mask
  on the host to decide whether it may skip the mask.

Seen on the lent H100 on 2026-12-05 (examples/hf_trainer_tiny.py under ``gpudiag profile``, transformers and
accelerate as installed there; fixtures/runs/PROVENANCE.md).
"""

from __future__ import annotations

KNOWN = (
    (
        "transformers/trainer.py",
        ("is_nonzero",),
        "HF Trainer checks every step's loss for not-a-number and infinite values on the host "
        "(logging_nan_inf_filter, on by default): TrainingArguments(logging_nan_inf_filter=False) removes these syncs",
    ),
    (
        "accelerate/utils/operations.py",
        ("aten::to", "aten::_to_copy", "aten::copy_"),
        "accelerate copies each batch to the GPU with a blocking copy: TrainingArguments(dataloader_pin_memory=True, "
        "accelerator_config={'non_blocking': True}) (Accelerator(non_blocking=True) with accelerate alone) makes the "
        "copy asynchronous from pinned memory",
    ),
    (
        "transformers/masking_utils.py",
        ("is_nonzero",),
        "the model reads the padding mask on the host to decide whether it can skip the attention mask: when your "
        "batches have no padding, leave attention_mask out of them (a collator that does not return it)",
    ),
)


def library_fix(library_location: str | None, op: str) -> str | None:
    """The fix for a sync a library makes at ``library_location`` (``…/site-packages/transformers/trainer.py:1847``)
    with ``op``, or None when the site is not a known one."""
    if not isinstance(library_location, str) or not library_location:
        return None
    file = library_location.replace("\\", "/").rpartition(":")[0]
    for suffix, ops, fix in KNOWN:
        if file.endswith("/" + suffix) and any(o in op for o in ops):
            return fix
    return None
