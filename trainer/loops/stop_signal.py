"""A stop signal during fit (SIGTERM, Ctrl-C, the requeue signal): noted when it arrives, acted on at a
step boundary, where ``interrupted.ckpt`` is saved before the process leaves."""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from trainer.loops.progress import Progress
    from trainer.view import TrainerView


class StopSignal:
    """The signal a fit received (``received``) and the save it triggers."""

    def __init__(self, trainer: TrainerView) -> None:
        self.trainer = trainer
        self.received: str | None = None
        self.saving = False  # a second Ctrl-C waits until interrupted.ckpt is complete

    def names(self) -> list[str]:
        requeue = self.trainer.requeue_signal
        return ["SIGTERM", "SIGINT"] + ([requeue] if requeue else [])

    def on_signal(self, name: str) -> None:
        """SIGTERM/SIGUSR1 and a first Ctrl-C only set a flag: the loop finishes the step and saves.
        A second Ctrl-C raises KeyboardInterrupt at once."""
        if name == "SIGINT" and self.received == "SIGINT" and not self.saving:
            raise KeyboardInterrupt
        self.received = self.received or name

    def save_and_exit(self, progress: Progress) -> NoReturn:
        """A signal stopped the loop at a step boundary: save ``interrupted.ckpt``, then leave.

        Ctrl-C re-raises KeyboardInterrupt; SIGTERM / the requeue signal end the process cleanly.
        """
        trainer, name = self.trainer, self.received
        from trainer.claims import claim_for_run

        path = claim_for_run(trainer, trainer.checkpoint_dir, "interrupted")  # another run's is never replaced
        self.saving = True
        try:
            trainer.save_checkpoint(path)
        finally:
            self.saving = False
        if trainer.is_global_zero:
            print(
                f"steadytrain: {name} received; saved {path} at epoch {progress.epoch}, step {progress.global_step}.",
                flush=True,
            )
        if name == "SIGINT":
            raise KeyboardInterrupt
        raise SystemExit(0)
