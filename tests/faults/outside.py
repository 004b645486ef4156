"""Files touched from outside a run (issue 36): a cp over last.ckpt, a deleted log folder, a killed save's
leftovers, damaged, copied or foreign checkpoints, a folder turned read-only. Each script does what a user or
a tool did to the files, then checks what a user would look at: a failed check raises, so the job is no OK."""

from __future__ import annotations

import signal
import textwrap
from pathlib import Path

from tests.faults.harness import Case, Check, Mount, Signal

_EPOCHS = """
if "prepare" in sys.argv:  # three epochs, a checkpoint kept for each, and last.ckpt
    keep = trainer.ModelCheckpoint(dirpath="ckpts", save_top_k=-1)
    make_trainer(callbacks=[keep], logger=False, max_epochs=3).fit(Net(), loader())
    sys.exit()
"""


def _never_says(text: str) -> Check:
    """The output must not hold ``text`` (a warning that blames the wrong cause)."""

    def check(folder: Path, output: str) -> str | None:
        return f"SILENT: the output says {text!r}" if text in output else None

    return check


def _epochs(body: str) -> str:
    """``body`` run after a preparing run left three epochs' checkpoints."""
    return _EPOCHS + textwrap.dedent(body)


def step_of(path: str) -> str:
    return f'torch.load("{path}", weights_only=True)["global_step"]'


OUTSIDE = [
    Case(
        "outside-cp-over-last-ckpt",
        _epochs(
            f"""
        shutil.copyfile("ckpts/epoch=0-step=8.ckpt", "ckpts/last.ckpt")  # a user's cp over last.ckpt
        assert {step_of("ckpts/epoch=2-step=24.ckpt")} == 24, "the cp wrote through last.ckpt into epoch=2"
        print("epoch=2 intact", flush=True)
        """
        ),
        says=("epoch=2 intact",),
        expect="OK",
        prepare=(("prepare",),),
    ),
    Case(
        "outside-log-folder-deleted",
        """
        class DeleteLogs(trainer.Callback):
            def on_train_epoch_end(self, trainer, module):
                if trainer.current_epoch == 0:
                    shutil.rmtree(trainer.logger.log_dir)  # a cleanup job

        fit = make_trainer(max_epochs=3, log_every_n_steps=1, callbacks=[DeleteLogs()],
                           logger=trainer.loggers.CSVLogger("runs"))
        fit.fit(Net(), loader())
        rows = Path(fit.logger.log_dir, "metrics.csv").read_text().splitlines()
        assert any(row.endswith(",23") or ",23," in row for row in rows), "the last epoch's rows are lost"
        done(fit)
        """,
        says=("metrics.csv was deleted", "DONE"),
        expect="OK",
    ),
    Case(
        "outside-log-folder-deleted-tensorboard",
        """
        class DeleteLogs(trainer.Callback):
            def on_train_epoch_end(self, trainer, module):
                if trainer.current_epoch == 0:
                    shutil.rmtree(trainer.logger.log_dir)  # a cleanup job

        fit = make_trainer(max_epochs=3, log_every_n_steps=1, callbacks=[DeleteLogs()],
                           logger=trainer.loggers.TensorBoardLogger("runs"))
        fit.fit(Net(), loader())
        assert list(Path(fit.logger.log_dir).glob("events.out.tfevents*")), "no event file after the deletion"
        done(fit)
        """,
        says=("was deleted while this run logged", "DONE"),
        expect="OK",
    ),
    Case(  # wandb's service cannot reopen its deleted stream: the run stops, naming the file
        "outside-log-folder-deleted-wandb-offline",
        """
        os.environ["WANDB_SILENT"] = "true"

        class DeleteLogs(trainer.Callback):
            def on_train_epoch_end(self, trainer, module):
                if trainer.current_epoch == 0:
                    shutil.rmtree("wb/wandb")  # a cleanup job

        logger = trainer.loggers.WandbLogger(save_dir="wb", offline=True)
        make_trainer(max_epochs=3, log_every_n_steps=1, callbacks=[DeleteLogs()], logger=logger).fit(Net(), loader())
        """,
        says=("offline run file wb/wandb/offline-run-", ".wandb was deleted", "ckpt_path='last'"),
        deadline=90.0,
    ),
    Case(  # MLflow's local file store: its run cannot be made again, so the run stops naming the store
        "outside-log-folder-deleted-mlflow",
        """
        class DeleteLogs(trainer.Callback):
            def on_train_epoch_end(self, trainer, module):
                if trainer.current_epoch == 0:
                    os.remove("mlflow.db")  # a cleanup job

        logger = trainer.loggers.MLFlowLogger(tracking_uri="sqlite:///mlflow.db", save_dir="runs")
        make_trainer(max_epochs=3, log_every_n_steps=1, callbacks=[DeleteLogs()], logger=logger).fit(Net(), loader())
        """,
        says=("MLFlowLogger: the MLflow store", "mlflow.db", "was deleted while run"),
        deadline=90.0,
    ),
    Case(
        "outside-kill-9-mid-save-leaves-no-fake-checkpoint",
        """
        class Big(Net):
            def __init__(self):
                super().__init__()
                self.table = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(256, 256)) for _ in range(64))

        keep = trainer.ModelCheckpoint(dirpath="ckpts", every_n_train_steps=1)
        fit = make_trainer(max_epochs=2, callbacks=[Announce(), keep], logger=False)
        fit.fit(Big(), loader(n=64), ckpt_path="last" if RESUME else None)
        if RESUME:
            empty = [p.name for p in Path("ckpts").glob("*.ckpt") if p.stat().st_size == 0]
            assert not empty and not list(Path("ckpts").glob("*-v1.ckpt")), f"left: {sorted(os.listdir('ckpts'))}"
        done(fit)
        """,
        expect="OK",
        signals=(Signal(signal.SIGKILL, count=3, file="ckpts/.epoch=*.tmp-*", file_bytes=1 << 20),),
        resume=("resume",),
        deadline=90.0,
    ),
    Case(
        "outside-last-ckpt-cut-short",
        _epochs(
            """
        data = Path("ckpts/last.ckpt").read_bytes()
        Path("ckpts/last.ckpt").write_bytes(data[:-1])
        fit = make_trainer(max_epochs=4, callbacks=[trainer.ModelCheckpoint(dirpath="ckpts")], logger=False)
        fit.fit(Net(), loader(), ckpt_path="last")
        done(fit)
        """
        ),
        says=("cut-short checkpoint", "last.ckpt", "DONE"),
        expect="OK",
        prepare=(("prepare",),),
    ),
    Case(
        "outside-copied-checkpoints-resume-highest-step",
        _epochs(
            """
        Path("copy").mkdir()
        for name in ("epoch=2-step=24.ckpt", "epoch=1-step=16.ckpt", "epoch=0-step=8.ckpt"):  # newest time: step 8
            shutil.copyfile(Path("ckpts", name), Path("copy", name))
            time.sleep(0.05)
        fit = make_trainer(max_epochs=3, callbacks=[trainer.ModelCheckpoint(dirpath="copy")], logger=False)
        fit.fit(Net(), loader(), ckpt_path="last")
        done(fit)
        """
        ),
        says=("copy/epoch=2-step=24.ckpt at epoch 3, step 24", "DONE"),  # dirpath is absolute, as Lightning's
        expect="OK",
        prepare=(("prepare",),),
    ),
    Case(
        "outside-weights-only-callback-beside-default",
        """
        def callbacks():
            return [trainer.ModelCheckpoint(dirpath="ckpts"),
                    trainer.ModelCheckpoint(dirpath="ckpts", save_weights_only=True)]

        if "prepare" in sys.argv:
            make_trainer(callbacks=callbacks(), logger=False, max_epochs=2).fit(Net(), loader())
            sys.exit()
        fit = make_trainer(callbacks=callbacks(), logger=False, max_epochs=3)
        fit.fit(Net(), loader(), ckpt_path="last")
        done(fit)
        """,
        says=("DONE rank=0 step=24",),
        checks=(_never_says("another run"),),
        expect="OK",
        prepare=(("prepare",),),
    ),
    Case(
        "outside-checkpoint-without-optimizer-states",
        _epochs(
            """
        state = torch.load("ckpts/last.ckpt", weights_only=True)
        del state["optimizer_states"]
        torch.save(state, "foreign.ckpt")
        make_trainer(max_epochs=4, logger=False).fit(Net(), loader(), ckpt_path="foreign.ckpt")
        """
        ),
        says=("foreign.ckpt", "optimizer_states"),
        prepare=(("prepare",),),
    ),
    Case(
        "outside-checkpoint-of-a-newer-format",
        _epochs(
            """
        state = torch.load("ckpts/last.ckpt", weights_only=True)
        state["format"] = "steadytrain/99"
        torch.save(state, "newer.ckpt")
        make_trainer(max_epochs=4, logger=False).fit(Net(), loader(), ckpt_path="newer.ckpt")
        """
        ),
        says=("newer.ckpt", "steadytrain/99", "newer than", "upgrade steadytrain"),
        prepare=(("prepare",),),
    ),
    Case(
        "outside-checkpoint-folder-turns-read-only",
        """
        import subprocess

        class ReadOnly(trainer.Callback):
            def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
                if trainer.global_step == 2:
                    subprocess.run(["mount", "-o", "remount,ro", "mnt"], check=True)

        keep = trainer.ModelCheckpoint(dirpath="mnt/ckpts", every_n_train_steps=4, save_top_k=-1)
        make_trainer(callbacks=[ReadOnly(), keep], logger=False).fit(Net(), loader())
        """,
        says=("could not write checkpoint", "mnt/ckpts"),
        mount=Mount(size="8m"),
    ),
]
