"""The failure catalogue: every way a user's job can go wrong, and how it must end.

One list, ``CASES``, read by the pytest suite (``tests/faults/test_catalogue.py``) and by
``benchmarks/faults.py``. Each case is a few lines of a user's script (after ``harness.PRELUDE``,
which defines ``Net``, ``loader``, ``Announce``, ``every_step``, ``make_trainer`` and ``done``)
and the class it must get, normally CLEAR with the texts its message must hold. ``known`` says
how a case fails today; the suite marks those ``xfail(strict=True)`` so they flip once fixed.
"""

from __future__ import annotations

import signal

from tests.faults.harness import (
    Case,
    Check,
    Mount,
    Signal,
    absent,
    csv_readable,
    last_line,
    left_behind,
    loads,
)
from tests.faults.outside import OUTSIDE
from tests.faults.shared_folder import SHARED_FOLDER

DDP_DEADLINE = 120.0  # two ranks start two interpreters on a shared 2-core machine


# ---- bad flags and values ------------------------------------------------------------------------
def _flag(name: str, flags: str, says: tuple[str, ...], known: str | None = None) -> Case:
    """A Trainer built with one bad flag must refuse it before any work."""
    return Case(f"flag-{name}", f"make_trainer({flags}).fit(Net(), loader())", says=says, known=known)


FLAGS = [
    _flag("unknown-strategy", 'strategy="fsdp9"', ("'fsdp9'", "ddp")),
    _flag("unknown-precision", 'precision="8-bit"', ("'8-bit'", "32-true")),
    _flag("unknown-accelerator", 'accelerator="tpu"', ("'tpu'", "cpu")),
    _flag("accelerator-not-here", 'accelerator="mps"', ("mps", "accelerator='cpu'")),
    _flag("negative-max-epochs", "max_epochs=-2", ("max_epochs=-2", "-1 (no limit)")),
    _flag(
        "max-epochs-as-string",
        'max_epochs=os.environ.get("EPOCHS", "3")',
        ("max_epochs='3'",),
    ),
    Case(
        "flag-max-epochs-fraction",
        "fit = make_trainer(max_epochs=1.5)\nfit.fit(Net(), loader())\ndone(fit)",
        says=("max_epochs=1.5",),
    ),
    _flag("devices-zero", 'strategy="ddp", devices=0', ("devices=0",)),
    _flag("devices-beyond-cores", 'strategy="ddp", devices=64', ("devices=64", "cores")),
    _flag("devices-not-a-number", 'devices="two"', ("devices='two'",)),
    _flag("dp-on-cpu", 'strategy="dp"', ("strategy='dp'", "ddp")),
    _flag("bad-clip-algorithm", 'gradient_clip_algorithm="l2"', ("'l2'", "norm", "value")),
    _flag(
        "clip-value-as-string",
        'gradient_clip_val="1.0"',
        ("gradient_clip_val='1.0'",),
    ),
    Case(  # Lightning's rule: no training, no error; we say so where Lightning is silent
        "flag-limit-train-batches-zero",
        "fit = make_trainer(limit_train_batches=0)\nfit.fit(Net(), loader())\ndone(fit)",
        says=("limit_train_batches=0: fit runs no training step", "step=0"),
        expect="OK",
    ),
    _flag(
        "callback-class-not-instance",
        "callbacks=[trainer.ModelCheckpoint]",
        ("ModelCheckpoint",),
    ),
    Case(
        "flag-monitor-never-logged",
        """
        fit = make_trainer(callbacks=[trainer.ModelCheckpoint(dirpath="ckpts", monitor="val_acc")])
        fit.fit(Net(), loader(), loader(n=16))
        """,
        says=("val_acc", "val_loss"),
    ),
]


# ---- bad module definitions ------------------------------------------------------------------------
def _step(name: str, body: str, says: tuple[str, ...], expect: str = "CLEAR") -> Case:
    """A training_step that ends with ``body`` instead of returning the loss."""
    script = f"""
    class Broken(Net):
        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            {body}

    make_trainer().fit(Broken(), loader())
    """
    return Case(f"module-step-{name}", script, says=says, expect=expect)


def _optimizers(name: str, body: str, says: tuple[str, ...], known: str | None = None) -> Case:
    """A configure_optimizers whose body is ``body``."""
    script = f"""
    class Broken(Net):
        def configure_optimizers(self):
            {body}

    make_trainer().fit(Broken(), loader())
    """
    return Case(f"module-optimizers-{name}", script, says=says, known=known)


MODULES = [
    Case(
        "module-no-training-step",
        """
        class NoStep(trainer.Module):
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Linear(8, 1)

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.01)

        make_trainer().fit(NoStep(), loader())
        """,
        says=("NoStep", "training_step"),
    ),
    Case(
        "module-no-configure-optimizers",
        """
        class NoOptimizer(trainer.Module):
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Linear(8, 1)

            def training_step(self, batch, batch_idx):
                x, y = batch
                return torch.nn.functional.mse_loss(self.net(x), y)

        make_trainer().fit(NoOptimizer(), loader())
        """,
        says=("NoOptimizer", "configure_optimizers"),
    ),
    Case(
        "module-plain-nn-module",
        "make_trainer().fit(torch.nn.Linear(8, 1), loader())",
        says=("trainer.Module", "Linear"),
    ),
    # None is Lightning's way to skip a batch: each such batch is skipped, with Lightning's warning (which asks)
    _step(
        "returns-none", "self.log('train_loss', loss)  # forgot the return", ("`training_step` returned `None`",), "OK"
    ),
    _step("returns-per-sample-losses", "return (self.net(x) - y) ** 2", ("(8, 1)", "scalar")),
    _step("returns-detached", "return loss.detach()", ("does not require grad",)),
    _step("returns-float", "return loss.item()", ("training_step", "float")),
    _step("returns-dict-without-loss", "return {'train_loss': loss}", ("'loss'",)),
    Case(
        "module-step-takes-no-batch",  # (batch) alone is fine, as in Lightning: batch_idx is optional
        """
        class Broken(Net):
            def training_step(self):
                return torch.zeros((), requires_grad=True)

        make_trainer().fit(Broken(), loader())
        """,
        says=("training_step()", "positional argument"),
    ),
    Case(  # Lightning's rule: a fit with no optimizer runs, with Lightning's warning (the loss is not stepped)
        "module-optimizers-returns-none",
        """
        class Broken(Net):
            def configure_optimizers(self):
                torch.optim.SGD(self.parameters(), lr=0.01)  # forgot the return

        fit = make_trainer()
        fit.fit(Broken(), loader())
        done(fit)
        """,
        says=("`LightningModule.configure_optimizers` returned `None`", "no optimizer", "DONE"),
        expect="OK",
    ),
    _optimizers("returns-parameters", "return self.parameters()", ("generator",)),
    _optimizers(
        "returns-optimizer-class",
        "return torch.optim.SGD",
        ("SGD",),
    ),
    _optimizers(
        "scheduler-is-an-optimizer",
        "opt = torch.optim.SGD(self.parameters(), lr=0.01)\n            return {'optimizer': opt, 'lr_scheduler': opt}",
        ("`SGD`", "lr scheduler", "it is an optimizer"),
    ),
    _optimizers(
        "plateau-without-monitor",
        "opt = torch.optim.SGD(self.parameters(), lr=0.01)\n"
        "            return {'optimizer': opt, 'lr_scheduler': torch.optim.lr_scheduler.ReduceLROnPlateau(opt)}",
        ("ReduceLROnPlateau", "monitor"),
    ),
]


# ---- bad data ------------------------------------------------------------------------------------
DATA = [
    Case("data-no-loader", "make_trainer().fit(Net())", says=("training DataLoader",)),
    Case("data-dataset-not-loader", "make_trainer().fit(Net(), dataset())", says=("TensorDataset", "DataLoader(")),
    Case("data-one-tensor", "make_trainer().fit(Net(), torch.randn(64, 8))", says=("Tensor", "one batch")),
    Case(
        "data-batches-as-val-loaders",
        "make_trainer().fit(Net(), loader(), list(loader(n=16)))",
        says=("validation", "several loaders"),
    ),
    Case(
        "data-empty-dataset",
        "empty = TensorDataset(torch.empty(0, 8), torch.empty(0, 1))\n"
        "make_trainer().fit(Net(), DataLoader(empty, batch_size=8))",
        says=("training", "empty"),
    ),
    Case(
        "data-nan-inputs",
        """
        data = dataset()
        data.tensors[0][20] = float("nan")  # one corrupt sample
        make_trainer().fit(Net(), DataLoader(data, batch_size=8))
        """,
        says=("non-finite loss", "on_nonfinite_loss"),
    ),
    Case(
        "data-every-loss-nan-skipped",
        """
        class Diverged(Net):
            def training_step(self, batch, batch_idx):
                return super().training_step(batch, batch_idx) * float("nan")

        fit = make_trainer(on_nonfinite_loss="skip")
        fit.fit(Diverged(), loader())
        done(fit)
        """,
        expect="OK",
        says=("skipped",),
    ),
    Case(
        "data-uncollatable-samples",
        """
        class Sample:
            def __init__(self, i):
                self.x, self.y = torch.randn(8), torch.randn(1)

        class Records(Dataset):
            def __len__(self):
                return 64

            def __getitem__(self, i):
                return Sample(i)

        make_trainer().fit(Net(), DataLoader(Records(), batch_size=8))
        """,
        says=("Sample",),
    ),
    Case(
        "data-generator-for-two-epochs",
        """
        batches = (batch for batch in loader())  # a generator is used up after one pass
        fit = make_trainer(max_epochs=2)
        fit.fit(Net(), batches)
        done(fit)
        """,
        says=("generator",),
    ),
]


# ---- DataLoader workers that die --------------------------------------------------------------------
_WORKER = """
class Flaky(Dataset):
    \"\"\"Fails on a given fetch in a worker process (counted per worker, across epochs).\"\"\"

    def __init__(self):
        self.data, self.fetched = dataset(), 0

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        self.fetched += 1
        if self.fetched == FAIL_AT:
            ACTION
        return self.data[i]

"""
_KILL = "os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would"
_RAISE = 'raise ValueError(f"bad sample {i}")'


def _worker(
    name: str, action: str, fit: str, fail_at: int, says: tuple[str, ...], checks: tuple[Check, ...] = ()
) -> Case:
    script = _WORKER.replace("ACTION", action).replace("FAIL_AT", str(fail_at)) + fit
    return Case(f"worker-{name}", script, says=says, checks=checks)


_TRAIN_WORKERS = "make_trainer(max_epochs=2).fit(Net(), DataLoader(Flaky(), batch_size=8, num_workers=2))\n"
_TRAIN_PERSISTENT = (
    "make_trainer(max_epochs=2).fit(Net(), DataLoader(Flaky(), batch_size=8, num_workers=2, persistent_workers=True))\n"
)
_VAL_WORKERS = (
    "val = DataLoader(Flaky(), batch_size=8, num_workers=2, persistent_workers=True)\n"
    "make_trainer(max_epochs=2).fit(Net(), loader(), val)\n"
)
_WORKER_DIED = ("DataLoader worker (pid",)
_WORKER_LAST = (last_line("steadytrain: DataLoader worker", "failed: ValueError: bad sample"),)
WORKERS = [
    # torch says "DataLoader worker (pid N) is killed by signal: Killed." or, when it notices the death
    # by polling first, only "DataLoader worker (pid(s) N) exited unexpectedly": both name the worker.
    _worker("sigkilled", _KILL, _TRAIN_WORKERS, 10, _WORKER_DIED),
    _worker("sigkilled-persistent-epoch-2", _KILL, _TRAIN_PERSISTENT, 40, _WORKER_DIED),
    _worker("raises", _RAISE, _TRAIN_WORKERS, 10, ("bad sample",), _WORKER_LAST),
    _worker("raises-persistent-epoch-2", _RAISE, _TRAIN_PERSISTENT, 40, ("bad sample",), _WORKER_LAST),
    _worker("sigkilled-in-validation", _KILL, _VAL_WORKERS, 12, _WORKER_DIED),
    Case(
        "worker-stuck-with-loader-timeout",
        _WORKER.replace("ACTION", "time.sleep(3600)").replace("FAIL_AT", "10")
        + "make_trainer().fit(Net(), DataLoader(Flaky(), batch_size=8, num_workers=2, timeout=5))\n",
        says=("timed out after 5 seconds",),
    ),
]


# ---- ranks that die or hang under strategy="ddp", devices=2 ----------------------------------------------
def _rank(
    name: str,
    action: str,
    says: tuple[str, ...],
    *,
    rank: int = 1,
    strategy: str = '"ddp"',
    deadline: float = DDP_DEADLINE,
    known: str | None = None,
    flags: str = "",
    checks: tuple[Check, ...] = (),
    data: str = "loader()",
) -> Case:
    """Rank ``rank`` does ``action`` at global step 3 of a 2-rank job."""
    script = f"""
    class Failing(Net):
        def training_step(self, batch, batch_idx):
            if self.global_step == 3 and self.global_rank == {rank}:
                {action}
            return super().training_step(batch, batch_idx)

    fit = make_trainer(strategy={strategy}, devices=2, max_epochs=2{flags})
    fit.fit(Failing(), {data})
    done(fit)
    """
    return Case(f"ddp-{name}", script, says=says, deadline=deadline, known=known, checks=checks)


RANKS = [
    _rank(
        "rank1-raises",
        'raise RuntimeError("boom on rank 1")',
        ("boom on rank 1", "rank 1 exited"),
        checks=(last_line("steadytrain: rank 1 failed: RuntimeError: boom on rank 1"),),
    ),
    Case(
        "ddp-rank1-worker-raises",
        _WORKER.replace("ACTION", "raise ValueError(f\"bad sample {i} on rank {os.environ.get('RANK')}\")").replace(
            "FAIL_AT", "3"
        )
        + "fit = make_trainer(strategy='ddp', devices=2, max_epochs=2)\n"
        + "flaky = DataLoader(Flaky(), batch_size=8, num_workers=1)\n"
        + "fit.fit(Net(), flaky if os.environ.get('RANK') == '1' else loader())\n",
        says=("bad sample",),
        checks=(last_line("steadytrain: rank 1 failed: ValueError: bad sample", "on rank 1 (in DataLoader worker 0)"),),
        deadline=DDP_DEADLINE,
    ),
    _rank("rank0-raises", 'raise RuntimeError("boom on rank 0")', ("boom on rank 0",), rank=0),
    _rank("rank1-sigkilled", "os.kill(os.getpid(), signal.SIGKILL)", ("rank 1 was killed by SIGKILL",)),
    _rank(
        "rank1-exits-0-early",
        "sys.exit(0)  # a stray early exit on one rank",
        ("rank 1",),
    ),
    _rank(
        "rank1-hangs",
        "time.sleep(3600)  # a deadlock in user code",
        ("rank 1 did not arrive", "collective_timeout"),
        flags=", collective_timeout=10",  # the default, 600 s, would outlast the deadline
        deadline=90.0,
    ),
    _rank(
        "rank1-hangs-with-timeout",
        "time.sleep(3600)  # a deadlock in user code",
        ("rank 1", "timeout"),
        strategy="trainer.strategies.DDPStrategy(timeout=timedelta(seconds=5))",
    ),
    Case(
        "ddp-rank1-raises-in-validation",
        """
        class Failing(Net):
            def validation_step(self, batch, batch_idx):
                if self.global_rank == 1:
                    raise RuntimeError("boom in validation on rank 1")
                return super().validation_step(batch, batch_idx)

        fit = make_trainer(strategy="ddp", devices=2, max_epochs=2)
        fit.fit(Failing(), loader(), loader(n=32))
        """,
        says=("boom in validation on rank 1",),
        deadline=DDP_DEADLINE,
    ),
]


# ---- signals at several moments --------------------------------------------------------------------------
# 3 epochs of 16 steps; each step "works" 50 ms, so a signal sent on STEP=5 lands mid-run.
_RUN = """
fit = make_trainer(max_epochs=3, callbacks=[Announce(), every_step()])
fit.fit(Net(step_s=0.05), loader(n=128, shuffle=True), ckpt_path="last" if RESUME else None)
done(fit)
"""
# A 16 MB checkpoint in 64 tensors, written one by one: a save lasts long enough to be caught
# while its temporary exists, with most of its tensors still to write.
_BIG = """
class Big(Net):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(256, 256)) for _ in range(64))

fit = make_trainer(max_epochs=3, callbacks=[Announce(), every_step()])
fit.fit(Big(), loader(n=128, shuffle=True), ckpt_path="last" if RESUME else None)
done(fit)
"""
_SLOW_VAL = """
class SlowValidation(Net):
    def on_validation_epoch_start(self):
        print("VALIDATING", flush=True)

    def validation_step(self, batch, batch_idx):
        time.sleep(0.05)
        return super().validation_step(batch, batch_idx)

fit = make_trainer(max_epochs=3, callbacks=[Announce(), every_step()])
fit.fit(SlowValidation(), loader(n=128, shuffle=True), loader(n=128), ckpt_path="last" if RESUME else None)
done(fit)
"""
_WORKERS_RUN = """
fit = make_trainer(max_epochs=3, callbacks=[Announce(), every_step()])
data = loader(n=128, shuffle=True, num_workers=2, persistent_workers=True)
fit.fit(Net(step_s=0.05), data, ckpt_path="last" if RESUME else None)
done(fit)
"""
_SAVING = "ckpts/.last.ckpt.tmp-*"
_MB = 1 << 20  # a signal lands once the temporary holds 1 of its 16 MB: inside torch.save
_KEPT = (loads("ckpts/last.ckpt"), csv_readable())
_SAVED = (loads("ckpts/interrupted.ckpt"), *_KEPT)


def _signal(
    name: str,
    script: str,
    expect: str,
    says: tuple[str, ...],
    *signals: Signal,
    checks: tuple[Check, ...],
    deadline: float = 60.0,
    known: str | None = None,
) -> Case:
    """Signals sent to a run that must lose nothing: ``checks`` look at its files, then it must resume."""
    return Case(
        f"signal-{name}",
        script,
        says=says,
        expect=expect,
        signals=signals,
        checks=checks,
        resume=("resume",),
        deadline=deadline,
        known=known,
    )


SIGNALS = [
    _signal(
        "sigterm-mid-epoch",
        _RUN,
        "OK",
        ("SIGTERM received; saved",),
        Signal(signal.SIGTERM, count=5),
        checks=_SAVED,
    ),
    _signal(
        "sigterm-mid-save",
        _BIG,
        "OK",
        ("SIGTERM received; saved",),
        Signal(signal.SIGTERM, count=3, file=_SAVING, file_bytes=_MB),
        checks=_SAVED,
    ),
    _signal(
        "sigterm-mid-validation",
        _SLOW_VAL,
        "OK",
        ("SIGTERM received; saved",),
        Signal(signal.SIGTERM, after="VALIDATING"),
        checks=_SAVED,
    ),
    _signal(
        "sigterm-to-group-with-workers",
        _WORKERS_RUN,
        "OK",
        ("SIGTERM received; saved",),
        Signal(signal.SIGTERM, count=5, to="group"),
        checks=_SAVED,
    ),
    _signal(
        "sigusr1-requeue",
        _RUN,
        "OK",
        ("SIGUSR1 received; saved",),
        Signal(signal.SIGUSR1, count=5),
        checks=_SAVED,
    ),
    _signal(
        "sigint-mid-epoch",
        _RUN,
        "CLEAR",
        ("SIGINT received; saved",),
        Signal(signal.SIGINT, count=5),
        checks=_SAVED,
    ),
    _signal(
        "sigint-twice-mid-save",
        _BIG,
        "CLEAR",
        ("KeyboardInterrupt",),
        Signal(signal.SIGINT, count=3),
        Signal(signal.SIGINT, after=None, file="ckpts/.interrupted.ckpt.tmp-*", file_bytes=_MB),
        checks=_KEPT,
    ),
    _signal("sigkill-mid-epoch", _RUN, "OK", (), Signal(signal.SIGKILL, count=5), checks=_KEPT),
    _signal(
        "sigkill-mid-save",
        _BIG,
        "OK",
        (),
        Signal(signal.SIGKILL, count=3, file=_SAVING, file_bytes=_MB),
        checks=(left_behind(_SAVING), *_KEPT),
    ),
    _signal("sigkill-mid-validation", _SLOW_VAL, "OK", (), Signal(signal.SIGKILL, after="VALIDATING"), checks=_KEPT),
    _signal(
        "sigkill-group-with-workers",
        _WORKERS_RUN,
        "OK",
        (),
        Signal(signal.SIGKILL, count=5, to="group"),
        checks=_KEPT,
    ),
]

_DDP_RUN = """
class Reporting(Net):
    def on_fit_start(self):
        print(f"PID{self.global_rank}={os.getpid()}", flush=True)

fit = make_trainer(strategy="ddp", devices=2, max_epochs=3, callbacks=[Announce(), every_step()])
fit.fit(Reporting(step_s=0.05), loader(n=256, shuffle=True), ckpt_path="last" if RESUME else None)
done(fit)
"""
_DDP_BIG = """
from trainer.checkpoint import io as checkpoint_io

write = checkpoint_io._Recording.write


def slow_disk(self, data):  # rank 0's save pauses 1 s at its second MB: rank 1's death lands mid-write on any machine
    if self.file.tell() >= 1 << 20 and not getattr(self, "paused", False):
        self.paused = True
        time.sleep(1.0)
    return write(self, data)


class Reporting(Net):
    def __init__(self):  # 16 MB of state in 64 buffers (DDP needs every parameter in the loss)
        super().__init__()
        for i in range(64):
            self.register_buffer(f"table{i}", torch.zeros(256, 256))

    def on_fit_start(self):
        print(f"PID{self.global_rank}={os.getpid()}", flush=True)
        if self.global_rank == 0 and not RESUME:
            checkpoint_io._Recording.write = slow_disk

    def on_save_checkpoint(self, checkpoint):
        if self.global_rank == 0:
            print("SAVING", flush=True)

fit = make_trainer(strategy="ddp", devices=2, max_epochs=2, callbacks=[Announce(), every_step()])
fit.fit(Reporting(), loader(n=64, shuffle=True), ckpt_path="last" if RESUME else None)
done(fit)
"""
SIGNALS += [
    _signal(
        "ddp-sigterm-rank0",
        _DDP_RUN,
        "OK",
        ("SIGTERM received; saved",),
        Signal(signal.SIGTERM, count=5),
        checks=_SAVED,
        deadline=DDP_DEADLINE,
    ),
    _signal(
        "ddp-sigterm-rank1-only",
        _DDP_RUN,
        "OK",
        ("SIGTERM received; saved",),
        Signal(signal.SIGTERM, count=5, to="PID1="),
        checks=_SAVED,
        deadline=DDP_DEADLINE,
    ),
    _signal(  # rank 1 dies while rank 0 writes: the job ends, rank 0's half-written file is no checkpoint
        "ddp-sigkill-rank1-mid-rank0-save",
        _DDP_BIG,
        "CLEAR",
        ("rank 1 was killed by SIGKILL", "stopping all ranks"),
        Signal(signal.SIGKILL, after="SAVING", count=2, file=_SAVING, file_bytes=_MB, to="PID1="),
        # sent while rank 0's second temporary held 1 MB of 16: rank 0, stopped, removes it; last.ckpt is the first
        checks=(absent(_SAVING, "rank 0's half-written temporary was left"), *_KEPT),
        deadline=DDP_DEADLINE,
    ),
    _signal(
        "ddp-sigkill-rank0",
        _DDP_RUN,
        "OK",
        (),
        Signal(signal.SIGKILL, count=5),
        checks=_KEPT,
        deadline=DDP_DEADLINE,
    ),
]

SIGNALS.append(
    Case(  # a crash mid-run with top-k kept: the resumed run keeps exactly k, the best among all epochs
        "crash-with-top-k-resumed",
        """
        class Crashing(Net):
            def on_train_batch_start(self, batch, batch_idx):
                if not RESUME and self.current_epoch == 3 and batch_idx == 2:
                    raise RuntimeError("CRASH in epoch 3")

        keep = trainer.ModelCheckpoint(dirpath="ckpts", monitor="val_loss", save_top_k=2)
        fit = make_trainer(max_epochs=5, callbacks=[keep], logger=False)
        fit.fit(Crashing(), loader(), loader(n=16), ckpt_path="last" if RESUME else None)
        if RESUME:
            kept = sorted(p.name for p in Path("ckpts").glob("*.ckpt") if p.name != "last.ckpt")
            scores = {name: float(torch.load(f"ckpts/{name}", weights_only=True)["callbacks"]
                                  [keep.state_key]["current_score"]) for name in kept}
            assert len(kept) == 2 and set(kept) == {Path(p).name for p in keep.best_k_models}, kept
            assert Path(keep.best_model_path).name == min(scores, key=scores.get), (keep.best_model_path, scores)
        done(fit)
        """,
        says=("CRASH in epoch 3",),
        resume=("resume",),
        deadline=90.0,
    )
)

# ---- full disks and folders that cannot be written --------------------------------------------------------
DISK = [
    Case(
        "disk-full-at-checkpoint",
        """
        # A 1 MiB disk holds one 600 kB checkpoint, not the temporary of the next one.
        fit = make_trainer(callbacks=[Announce(), every_step("mnt/ckpts")], logger=False)
        fit.fit(Net(hidden=15000), loader())
        """,
        says=("No space left", "mnt/ckpts"),
        mount=Mount(size="1m"),
        checks=(loads("mnt/ckpts/last.ckpt"),),
    ),
    Case(
        "disk-full-at-logs",
        """
        fit = make_trainer(
            default_root_dir="mnt/runs", enable_checkpointing=False, callbacks=[Announce()], log_every_n_steps=1
        )
        fit.fit(Net(), loader())
        """,
        says=("No space left", "mnt/runs"),
        mount=Mount(size="64k", fill=True),
    ),
    Case(
        "disk-read-only-root-dir",
        """
        fit = make_trainer(default_root_dir="mnt/runs", callbacks=[Announce()])
        fit.fit(Net(), loader())
        """,
        says=("Read-only file system", "mnt/runs"),
        mount=Mount(read_only=True),
    ),
    Case(
        "disk-read-only-checkpoint-dirpath",
        """
        fit = make_trainer(callbacks=[Announce(), trainer.ModelCheckpoint(dirpath="mnt/ckpts")], logger=False)
        fit.fit(Net(), loader())
        """,
        says=("Read-only file system", "mnt/ckpts"),
        mount=Mount(read_only=True),
    ),
    Case(
        "disk-checkpoint-dirpath-is-a-file",
        """
        Path("ckpts").write_text("notes")
        fit = make_trainer(callbacks=[Announce(), trainer.ModelCheckpoint(dirpath="ckpts")], logger=False)
        fit.fit(Net(), loader())
        """,
        says=("ckpts",),
    ),
    Case(
        "disk-root-dir-is-a-file",
        """
        Path("notes.txt").write_text("notes")
        fit = make_trainer(default_root_dir="notes.txt", callbacks=[Announce()])
        fit.fit(Net(), loader())
        """,
        says=("notes.txt",),
    ),
]


# ---- bad checkpoints -----------------------------------------------------------------------------------
_PAYLOAD = """
class Payload:
    \"\"\"Unpickling this runs a shell command.\"\"\"

    def __reduce__(self):
        return (os.system, ("touch PWNED",))

"""
_NO_PAYLOAD = (absent("PWNED", "the pickle payload ran"),)
_PREPARE = """
if "prepare" in sys.argv:  # an earlier run left its checkpoints
    make_trainer(callbacks=[every_step()], logger=False, max_steps=3).fit(Net(), loader())
    sys.exit()
"""


def _ckpt(
    name: str,
    script: str,
    says: tuple[str, ...],
    *,
    checks: tuple[Check, ...] = (),
    prepare: tuple[tuple[str, ...], ...] = (),
    known: str | None = None,
    expect: str = "CLEAR",
) -> Case:
    """A checkpoint the script makes (or spoils) and then hands to the Trainer."""
    return Case(f"ckpt-{name}", script, says=says, checks=checks, prepare=prepare, known=known, expect=expect)


CHECKPOINTS = [
    _ckpt(
        "random-bytes",
        'Path("model.ckpt").write_bytes(os.urandom(4096))\nmake_trainer().fit(Net(), loader(), ckpt_path="model.ckpt")',
        ("model.ckpt", "not a readable torch checkpoint"),
    ),
    _ckpt(
        "truncated-copy",
        _PREPARE + 'data = Path("ckpts/last.ckpt").read_bytes()\n'
        'Path("copy.ckpt").write_bytes(data[: len(data) // 2])  # a copy cut short\n'
        'make_trainer().fit(Net(), loader(), ckpt_path="copy.ckpt")',
        ("copy.ckpt", "not a readable torch checkpoint"),
        prepare=(("prepare",),),
    ),
    _ckpt(
        "empty-file",
        'Path("empty.ckpt").touch()\nmake_trainer().fit(Net(), loader(), ckpt_path="empty.ckpt")',
        ("empty.ckpt", "not a readable torch checkpoint"),
    ),
    _ckpt(
        "missing-file",
        'make_trainer().fit(Net(), loader(), ckpt_path="ckpts/nope.ckpt")',
        ("nope.ckpt", "does not exist"),
    ),
    _ckpt(
        "directory",
        'Path("ckpts").mkdir()\nmake_trainer().fit(Net(), loader(), ckpt_path="ckpts")',
        ("ckpts", "not a file"),
    ),
    _ckpt(
        "hostile-legacy-pickle",
        _PAYLOAD + "import pickle\n"
        "# protocol 2 is torch's legacy (non-zip) checkpoint format\n"
        'Path("evil.ckpt").write_bytes(pickle.dumps({"state_dict": Payload()}, protocol=2))\n'
        'make_trainer().fit(Net(), loader(), ckpt_path="evil.ckpt")',
        ("evil.ckpt", "NOT executed"),
        checks=_NO_PAYLOAD,
    ),
    _ckpt(
        "plain-pickle",
        _PAYLOAD + "import pickle\n"
        'Path("evil.ckpt").write_bytes(pickle.dumps({"state_dict": Payload()}))  # not torch.save at all\n'
        'make_trainer().fit(Net(), loader(), ckpt_path="evil.ckpt")',
        ("evil.ckpt", "not a readable torch checkpoint"),
        checks=_NO_PAYLOAD,
    ),
    _ckpt(
        "hostile-torch-save",
        _PAYLOAD + 'torch.save({"state_dict": Payload()}, "evil.ckpt")\n'
        'make_trainer().fit(Net(), loader(), ckpt_path="evil.ckpt")',
        ("evil.ckpt", "NOT executed"),
        checks=_NO_PAYLOAD,
    ),
    _ckpt(
        "hostile-load-from-checkpoint",
        _PAYLOAD + 'torch.save({"state_dict": Payload(), "hparams": {}}, "evil.ckpt")\n'
        'Net.load_from_checkpoint("evil.ckpt")',
        ("evil.ckpt", "NOT executed"),
        checks=_NO_PAYLOAD,
    ),
    _ckpt(
        "random-bytes-load-from-checkpoint",
        'Path("model.ckpt").write_bytes(os.urandom(4096))\nNet.load_from_checkpoint("model.ckpt")',
        ("model.ckpt", "not a readable torch checkpoint"),
    ),
    _ckpt(
        "weights-only-as-resume",
        'torch.save(Net().state_dict(), "weights.ckpt")\nmake_trainer().fit(Net(), loader(), ckpt_path="weights.ckpt")',
        ("weights.ckpt", "load_weights"),
    ),
    _ckpt(
        "not-a-dict",
        'torch.save([1, 2, 3], "list.ckpt")\nmake_trainer().fit(Net(), loader(), ckpt_path="list.ckpt")',
        ("list.ckpt", "list"),
    ),
    _ckpt(
        "last-is-torn",
        _PREPARE + 'path = Path("ckpts/last.ckpt")\n'
        "path.write_bytes(path.read_bytes()[:1000])  # rsync --inplace cut short\n"
        'fit = make_trainer(callbacks=[every_step()], logger=False)\nfit.fit(Net(), loader(), ckpt_path="last")\n'
        "done(fit)",
        ("last.ckpt",),
        prepare=(("prepare",),),
    ),
    _ckpt(
        "load-from-checkpoint-other-class",
        """
        class Wide(Net):
            def __init__(self, width_mult: int = 2):
                super().__init__(hidden=16 * width_mult)

        if "prepare" in sys.argv:
            make_trainer(callbacks=[every_step()], logger=False, max_steps=2).fit(Wide(), loader())
            sys.exit()
        Net.load_from_checkpoint("ckpts/last.ckpt")  # the wrong class
        """,
        ("Wide",),
        prepare=(("prepare",),),
    ),
]


# ---- damaged checkpoints: bytes changed after a complete save (a failing disk, bit rot, another tool's copy)
_DAMAGE = """
def damage(path):
    \"\"\"Zero 64 bytes in the middle of a file, as a bad sector would.\"\"\"
    data = bytearray(Path(path).read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(64)
    Path(path).write_bytes(data)

"""
_PREPARE_WEIGHTS = """
if "prepare" in sys.argv:  # an earlier run exported its weights only
    keep = trainer.ModelCheckpoint(dirpath="ckpts", every_n_train_steps=1, save_top_k=0, save_weights_only=True)
    make_trainer(callbacks=[keep], logger=False, max_steps=3).fit(Net(), loader())
    sys.exit()
"""
_DAMAGED = ("last.ckpt", "is damaged", "Nothing was loaded")
DAMAGED = [
    _ckpt(
        "damaged-resumed-explicitly",
        _DAMAGE + _PREPARE + 'damage("ckpts/last.ckpt")\n'
        'make_trainer().fit(Net(), loader(), ckpt_path="ckpts/last.ckpt")',
        _DAMAGED,
        prepare=(("prepare",),),
    ),
    _ckpt(
        "damaged-last-with-intact-older",
        _DAMAGE + _PREPARE + 'shutil.copy("ckpts/last.ckpt", "ckpts/older.ckpt")\n'
        'os.utime("ckpts/older.ckpt", (time.time() - 60, time.time() - 60))\n'
        'damage("ckpts/last.ckpt")\n'
        'fit = make_trainer(callbacks=[every_step()], logger=False)\nfit.fit(Net(), loader(), ckpt_path="last")\n'
        "done(fit)",
        ("skipped the damaged checkpoint /", "/ckpts/last.ckpt", "resumed from /", "/ckpts/older.ckpt", "DONE"),
        prepare=(("prepare",),),
        expect="OK",
    ),
    _ckpt(
        "damaged-every-one-via-last",
        _DAMAGE + _PREPARE + 'damage("ckpts/last.ckpt")\n'
        'make_trainer(callbacks=[every_step()]).fit(Net(), loader(), ckpt_path="last")',
        ("none is complete and intact", "last.ckpt"),
        prepare=(("prepare",),),
    ),
    _ckpt(
        "damaged-sharded-directory",
        _DAMAGE + _PREPARE + "from trainer.checkpoint.sharded import save_sharded\n"
        "from trainer.strategies.single import SingleDeviceStrategy\n\n"
        'save_sharded(torch.load("ckpts/last.ckpt", weights_only=True), Path("sharded.ckpt"), SingleDeviceStrategy())\n'
        'damage(next(Path("sharded.ckpt").glob("*.distcp")))\n'
        'make_trainer().fit(Net(), loader(), ckpt_path="sharded.ckpt")',
        ("sharded.ckpt", "is damaged", ".distcp"),
        prepare=(("prepare",),),
    ),
    _ckpt(
        "damaged-weights-export-load-weights",
        _DAMAGE + _PREPARE_WEIGHTS + 'damage("ckpts/last.ckpt")\n'
        'from trainer.checkpoint import load_weights\n\nload_weights(Net(), "ckpts/last.ckpt")',
        _DAMAGED,
        prepare=(("prepare",),),
    ),
    _ckpt(
        "damaged-load-from-checkpoint",
        _DAMAGE + _PREPARE + 'damage("ckpts/last.ckpt")\nNet.load_from_checkpoint("ckpts/last.ckpt")',
        _DAMAGED,
        prepare=(("prepare",),),
    ),
    _ckpt(
        "damaged-validate",
        _DAMAGE + _PREPARE + 'damage("ckpts/last.ckpt")\n'
        'make_trainer().validate(Net(), loader(), ckpt_path="ckpts/last.ckpt")',
        _DAMAGED,
        prepare=(("prepare",),),
    ),
    _ckpt(
        "damaged-plain-torch-save",  # a file written elsewhere: its zip's CRC-32 is what vouches for it
        _DAMAGE + 'torch.save(Net().state_dict(), "weights.pt")\ndamage("weights.pt")\n'
        'from trainer.checkpoint import load_weights\n\nload_weights(Net(), "weights.pt")',
        ("weights.pt", "is damaged", "CRC-32"),
    ),
]


# ---- resume with a changed configuration --------------------------------------------------------------------
def _resume(name: str, before: str, after: str, says: tuple[str, ...], known: str | None = None) -> Case:
    """A run stopped by max_steps=3 mid-epoch (before), resumed from last.ckpt with ``after``."""
    script = f"""
    if "prepare" in sys.argv:
        fit = make_trainer(callbacks=[every_step()], logger=False, max_steps=3)
        {before}
        sys.exit()
    fit = make_trainer(callbacks=[every_step()], logger=False)
    {after}
    done(fit)
    """
    return Case(f"resume-{name}", script, says=says, prepare=(("prepare",),), known=known)


_FIT_BEFORE = "fit.fit(Net(), loader(batch_size=8))"
RESUMES = [
    _resume(
        "batch-size-changed-mid-epoch",
        _FIT_BEFORE,
        'fit.fit(Net(), loader(batch_size=16), ckpt_path="last")',
        ("last.ckpt",),
    ),
    _resume(
        "dataset-shrunk-mid-epoch",
        _FIT_BEFORE,
        'fit.fit(Net(), loader(n=16, batch_size=8), ckpt_path="last")',
        ("last.ckpt",),
    ),
    _resume(
        "model-shape-changed",
        _FIT_BEFORE,
        'fit.fit(Net(hidden=32), loader(), ckpt_path="last")',
        ("Shape mismatch", "net.0.weight"),
    ),
    _resume(
        "optimizer-count-changed",
        _FIT_BEFORE,
        """
    class TwoOptimizers(Net):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False  # several optimizers: the module steps them

        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            self.manual_backward(loss)
            for opt in self.optimizers():
                opt.step()
                opt.zero_grad()

        def configure_optimizers(self):
            first, last = self.net[0].parameters(), self.net[2].parameters()
            return [torch.optim.SGD(first, lr=0.01), torch.optim.SGD(last, lr=0.01)]

    fit.fit(TwoOptimizers(), loader(), ckpt_path="last")""",
        ("1 optimizer state", "made 2"),
    ),
    _resume(
        "optimizer-type-changed",
        """
        class Momentum(Net):
            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)

        fit.fit(Momentum(), loader())""",
        """
    class WithAdam(Net):
        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    fit.fit(WithAdam(), loader(), ckpt_path="last")""",
        ("SGD", "Adam"),
    ),
    _resume(
        "scheduler-added",
        _FIT_BEFORE,
        """
    class Scheduled(Net):
        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.01)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, 2)]

    fit.fit(Scheduled(), loader(), ckpt_path="last")""",
        ("0 LR scheduler", "made 1"),
    ),
    Case(
        "resume-world-size-changed-mid-epoch",
        """
        if "prepare" in sys.argv:
            fit = make_trainer(strategy="ddp", devices=2, callbacks=[every_step()], logger=False, max_steps=2)
            fit.fit(Net(), loader())
            sys.exit()
        fit = make_trainer(callbacks=[every_step()], logger=False)
        fit.fit(Net(), loader(), ckpt_path="last")
        done(fit)
        """,
        says=("world_size 2 -> 1", "epoch's end"),
        prepare=(("prepare",),),
        deadline=DDP_DEADLINE,
    ),
]

CASES: list[Case] = (
    FLAGS + MODULES + DATA + WORKERS + RANKS + SIGNALS + DISK + CHECKPOINTS + DAMAGED + RESUMES + SHARED_FOLDER
) + OUTSIDE
BY_NAME = {case.name: case for case in CASES}
assert len(BY_NAME) == len(CASES), "case names must be unique"
