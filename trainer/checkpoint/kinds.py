"""What a checkpoint dict is, from its keys alone: a training checkpoint that resumes a run (ours or
Lightning's), weights only, or one this version cannot resume (a newer format, parts missing) and why.

``ckpt_path="last"`` sorts its candidates by this, and a resume refuses a file with its one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

FORMAT = "steadytrain/2"
READS = ("steadytrain/1", FORMAT)  # the formats this version reads
_OURS = re.compile(r"steadytrain/(\d+)")
LIGHTNING_VERSION = "pytorch-lightning_version"
# What a resume reads, by format (``state._upgrade`` brings /1 to /2's names first): the trainer's state, which a
# weights-only file (``save_weights_only=True``) has none of, and the rest.
_TRAINER_STATE = {
    "steadytrain/1": ("loop", "optimizers", "lr_schedulers", "precision", "ranks"),
    FORMAT: ("loops", "optimizer_states", "lr_schedulers", "precision", "ranks"),
}
_NEEDED = {"steadytrain/1": ("state_dict",), FORMAT: ("state_dict", "epoch", "global_step")}
_NEEDED_LOOPS = ("fit", "data")
LIGHTNING_NEEDED = ("state_dict", "loops", "optimizer_states", "lr_schedulers", "global_step")


@dataclass(frozen=True)
class Kind:
    """``resumes``: a full training checkpoint; else ``weights_only`` (a model export) or a ``problem``: what is
    missing or unknown in it."""

    resumes: bool
    weights_only: bool = False
    problem: str = ""
    format: str = ""

    def why_not(self, path: object) -> str:
        """The one line a resume from ``path`` fails with: the file, what it lacks, and what to do."""
        if self.weights_only:
            return (
                f"{path} holds weights only (no trainer state), so it cannot resume a run; load it with "
                "trainer.checkpoint.load_weights(module, path) before fit() instead."
            )
        return f"{path} {self.problem}"


def kind_of(checkpoint: Any) -> Kind:
    if not isinstance(checkpoint, dict):
        return Kind(False, problem=f"holds a {type(checkpoint).__name__}, not a checkpoint dict.")
    if LIGHTNING_VERSION in checkpoint:
        return _lightning(checkpoint)
    form = checkpoint.get("format")
    if form is None:
        return Kind(False, weights_only=True)
    match = _OURS.fullmatch(str(form))
    if match is None:
        return Kind(
            False,
            problem=f"has format {form!r}, which is not a steadytrain format (this version reads {', '.join(READS)}); "
            "it was written by another tool: load its weights with trainer.checkpoint.load_weights(module, path).",
            format=str(form),
        )
    if form not in _TRAINER_STATE:
        newer = int(match[1]) > int(_OURS.fullmatch(FORMAT)[1])  # type: ignore[index]
        return Kind(
            False,
            problem=f"was written in checkpoint format {form!r}, "
            + ("newer than" if newer else "unknown to")
            + f" this steadytrain (which reads {', '.join(READS)}): "
            + ("upgrade steadytrain (pip install -U steadytrain) to resume it." if newer else "it cannot resume here."),
            format=form,
        )
    trainer_state = [key for key in _TRAINER_STATE[form] if key not in checkpoint]
    if len(trainer_state) == len(_TRAINER_STATE[form]):
        return Kind(False, weights_only=True, format=form)  # save_weights_only=True: no trainer state at all
    missing = [key for key in _NEEDED[form] if key not in checkpoint] + trainer_state
    loops = checkpoint.get("loops")
    if form == FORMAT and isinstance(loops, dict):
        missing += [f"loops.{key}" for key in _NEEDED_LOOPS if key not in loops]
    if missing:
        return Kind(
            False,
            problem=f"is a {form} checkpoint without {', '.join(missing)}, so it cannot resume a run (was it edited, "
            "or saved by a script that left parts out?). Resume from another checkpoint, or load its weights with "
            "trainer.checkpoint.load_weights(module, path) and start a new run.",
            format=form,
        )
    return Kind(True, format=form)


def _lightning(checkpoint: dict[str, Any]) -> Kind:
    missing = [key for key in LIGHTNING_NEEDED if key not in checkpoint]
    return Kind(not missing, weights_only=bool(missing), format=f"Lightning {checkpoint[LIGHTNING_VERSION]}")


def progress_of(checkpoint: dict[str, Any]) -> tuple[int, int, int]:
    """How far the run was when it saved: (global step, epoch, batches trained); -1 where it does not say."""
    loop = checkpoint.get("loop")  # steadytrain/1
    loops = checkpoint.get("loops")
    fit = loops.get("fit") if isinstance(loops, dict) else None
    old = loop if isinstance(loop, dict) else {}
    step = checkpoint.get("global_step", old.get("global_step", -1))
    epoch = checkpoint.get("epoch", old.get("epoch", -1))
    batches = fit.get("total_batches", -1) if isinstance(fit, dict) else -1
    return _count(step), _count(epoch), _count(batches)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1
