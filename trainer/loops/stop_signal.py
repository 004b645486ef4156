"""A stop signal during fit (SIGTERM, Ctrl-C, the requeue signal): noted when it arrives, acted on at a
step boundary, where ``interrupted.ckpt`` is saved before the process leaves; on several ranks the
ranks vote so that all stop at the same batch (``StopVotes``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from trainer.exceptions import SIGTERMException

if TYPE_CHECKING:
    from trainer.loops.progress import Progress
    from trainer.strategies.base import Strategy
    from trainer.view import TrainerView

SIGNAL_CHECK_EVERY = 8  # batches between the ranks' agreement on a received signal


class StopVotes:
    """Several ranks agree on a stop signal every ``SIGNAL_CHECK_EVERY`` batches without waiting for it:
    the vote started after one batch is read after the next, its latency hidden behind that batch.

    Every rank starts and reads each vote at the same batch, so all stop at the same one (at most
    ``SIGNAL_CHECK_EVERY + 1`` batches after the signal); the epoch's end decides once more, waiting.
    """

    def __init__(self, strategy: Strategy) -> None:
        self.start = strategy.start_boolean_decision
        self.pending: Callable[[], bool] | None = None

    def after_batch(self, batch_idx: int, stop: bool) -> bool:
        pending = self.pending
        if pending is not None:
            self.pending = None
            return pending()
        if batch_idx % SIGNAL_CHECK_EVERY == 0:
            self.pending = self.start(stop)
        return False

    def finish(self) -> None:
        """Read a vote still open when the loop ended (its answer is asked again at the epoch's end)."""
        if self.pending is not None:
            self.pending()
            self.pending = None


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
        if name == "SIGTERM":
            raise SIGTERMException(0)  # a SystemExit: the process ends with status 0, as before
        raise SystemExit(0)
