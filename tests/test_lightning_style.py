"""Lightning users' scripts (tests/lightning_style) run as real processes, on one device and on two DDP ranks.

Each script is written as Lightning's docs and examples write it; its import lines, and only those,
are steadytrain's. The Lightning lines they replace are kept in the script as ``# lightning: ...``
comments, and ``test_script_is_its_lightning_original_with_imports_ported`` checks mechanically that
each steadytrain import line is ``port()`` of the Lightning line, in order, and that no other line
differs: the Lightning original is the script with those lines put back.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml

from tests.helpers import REPO_ROOT, clean_env, run_python
from tests.lightning_port import port

SCRIPTS = REPO_ROOT / "tests" / "lightning_style"
ORIGINAL = "# lightning: "
OURS = re.compile(r"\s*(from trainer\b|import trainer\b)")
DDP = ["--accelerator", "cpu", "--devices", "2", "--strategy", "ddp"]
CLI_CONFIG = ["fit", "--config", str(SCRIPTS / "lightning_cli.yaml")]
CLI_DDP = ["--trainer.devices", "2", "--trainer.strategy", "ddp"]

# Scripts that need what steadytrain does not have yet: the test must fail until it lands.
MISSING: dict[str, str] = {}
CLI_SCRIPTS = {"lightning_cli": CLI_CONFIG, "cli_logo": []}  # flags go to the CLI: --trainer.devices, ...
# Single-device runs under 10 s would join the default suite; on a shared 2-core machine each takes 10-22 s
# (a fresh interpreter importing torch is most of it), so every run is slow: `pytest -m slow -k lightning_style`.
FAST: set[str] = set()


def script_names() -> list[str]:
    return sorted(p.stem for p in SCRIPTS.glob("*.py"))


def script_args(name: str, world: int) -> list[str]:
    """The command-line arguments of a run of script ``name`` on ``world`` ranks (one device: its defaults)."""
    if name in CLI_SCRIPTS:
        return CLI_SCRIPTS[name] + (CLI_DDP if world > 1 else [])
    return DDP if world > 1 else []


def lightning_original(text: str) -> str:
    """The script as Lightning's user wrote it: each steadytrain import line replaced by its Lightning line."""
    lines = text.splitlines()
    originals = [line.removeprefix(ORIGINAL) for line in lines if line.startswith(ORIGINAL)]
    ours = [i for i, line in enumerate(lines) if OURS.match(line)]
    assert originals, "no '# lightning: <import line>' comments"
    assert [port(line) for line in originals] == [lines[i] for i in ours], "import lines are not the port's"
    for i, original in zip(ours, originals):
        lines[i] = original
    return "\n".join(line for line in lines if not line.startswith(ORIGINAL)) + "\n"


@pytest.mark.parametrize("name", script_names())
def test_script_is_its_lightning_original_with_imports_ported(name: str) -> None:
    text = (SCRIPTS / f"{name}.py").read_text()
    original = lightning_original(text)
    changed = [
        (a, b)
        for a, b in zip(original.splitlines(), [x for x in text.splitlines() if not x.startswith(ORIGINAL)])
        if a != b
    ]
    assert changed and all(port(a) == b and a.startswith(("from lightning.", "import lightning")) for a, b in changed)
    assert not re.search(r"^\s*(from|import) trainer\b", original, re.MULTILINE)  # nothing of ours left over
    compile(original, f"{name}.lightning.py", "exec")


def test_port_maps_submodules_and_renamed_names() -> None:
    assert port("from lightning.pytorch.callbacks.finetuning import BaseFinetuning") == (
        "from trainer.callbacks import BaseFinetuning"
    )
    assert port("from lightning.pytorch.cli import LightningCLI") == "from trainer.cli import CLI as LightningCLI"
    assert (
        port("from lightning.pytorch.profilers import SimpleProfiler") == "from trainer.profilers import SimpleProfiler"
    )
    assert port("import lightning as L") == "import trainer as L"  # L.LightningModule, L.Trainer, ...
    assert port("import lightning.pytorch as pl") == "import trainer as pl"
    assert port("from lightning.pytorch.core import LightningModule") == "from trainer import Module as LightningModule"
    assert port("from lightning.pytorch.trainer import Trainer") == "from trainer import Trainer"
    assert port("from lightning.pytorch.demos.mnist_datamodule import MNIST") == "from trainer.demos import MNIST"
    assert port("from lightning.pytorch.strategies import ParallelStrategy") == (
        "from trainer.strategies import ParallelStrategy"
    )
    assert port("    from lightning.pytorch import Trainer") == "    from trainer import Trainer"  # indented
    assert port("import lightning_utilities as L") == "import lightning_utilities as L"  # another package


# ---- what each script must print or write ----------------------------------------------------
def value(out: str, key: str) -> str:
    match = re.search(rf"(?:^|\s){re.escape(key)}=(\S+)", out, re.MULTILINE)
    assert match, f"{key}= not printed:\n{out}"
    return match[1]


def check_autoencoder(out: str, cwd: Path, world: int) -> None:
    assert int(value(out, "world_size")) == world
    # from ~0.33 (an untrained decoder) in 3 epochs: ~0.09 on one device, ~0.15 on two (half the steps)
    assert float(value(out, "test_loss")) < 0.2 and float(value(out, "val_loss")) < 0.2


def check_classifier_datamodule(out: str, cwd: Path, world: int) -> None:
    best = cwd / value(out, "best_model_path")
    assert best.is_file() and best.suffix == ".ckpt"
    assert float(value(out, "best_model_score")) > 0.8 and float(value(out, "test_acc")) > 0.8


def check_gan(out: str, cwd: Path, world: int) -> None:
    batches = 512 // 64 // world
    assert int(value(out, "global_step")) == 2 * batches * 2  # 2 epochs, 2 optimizer steps per batch
    assert value(out, "generator_changed") == "True"
    assert math.isfinite(float(value(out, "g_loss"))) and math.isfinite(float(value(out, "d_loss")))
    assert len(re.findall(r"^epoch=\d sample_mean=", out, re.MULTILINE)) == 2  # self.print: rank zero only


def check_several_val_loaders(out: str, cwd: Path, world: int) -> None:
    # after test(), what test logged: each stage starts with no metrics, as in Lightning
    assert "callback_metrics=['test_loss/dataloader_idx_0', 'test_loss/dataloader_idx_1']" in out
    # 4 and 2 batches per pass, shared by the ranks: fit's two validations plus validate()
    assert f"val_batches=[{12 // world}, {6 // world}]" in out
    assert "loader 0: validate=['val_loss/dataloader_idx_0'] test=['test_loss/dataloader_idx_0']" in out
    assert "loader 1: validate=['val_loss/dataloader_idx_1'] test=['test_loss/dataloader_idx_1']" in out


def check_finetuning(out: str, cwd: Path, world: int) -> None:
    # BaseFinetuning's on_train_epoch_start runs before the module's, as in Lightning
    assert "epoch=0 param_groups=1" in out and "epoch=1 param_groups=2" in out and "epoch=2 param_groups=3" in out
    assert "final param_groups=3 lrs=[0.0001, 1e-05, 1e-05]" in out
    # BatchNorm stays frozen (train_bn=False); every Linear of the backbone was unfrozen and trained
    assert "backbone_changed=[True, True, False, False, True, True, True, True]" in out


def check_mid_epoch_validation(out: str, cwd: Path, world: int) -> None:
    steps = 256 // 16 // world
    expected = [(e, e * steps + q * steps // 4) for e in range(4) for q in range(1, 5)]
    assert f"validations={expected}" in out
    losses = [float(v) for v in re.findall(r"^epoch=\d val_loss=(\S+)", out, re.MULTILINE)]
    assert len(losses) == 4
    best, lr = (
        math.inf,
        0.2,
    )  # ReduceLROnPlateau(mode="min", factor=0.5, patience=0), stepped on each epoch's last val_loss
    for loss in losses:
        if loss < best * (1 - 1e-4):
            best = loss
        else:
            lr *= 0.5
    assert float(value(out, "scheduler_best")) == pytest.approx(best, abs=1e-6)
    assert value(out, "last_epoch") == "4" and float(value(out, "lr")) == pytest.approx(lr)


def check_mlflow_logger(out: str, cwd: Path, world: int) -> None:
    assert int(value(out, "world_size")) == world and value(out, "runs") == "1"  # rank zero's run only
    assert value(out, "status") == "FINISHED" and value(out, "run_name") == "regressor" and value(out, "lr") == "0.05"
    steps = [int(s) for s in value(out, "train_loss_steps").split(",")]
    assert steps == sorted(set(steps)) and len(steps) >= 3 and steps[-1] <= int(value(out, "global_step"))
    assert value(out, "val_loss") == value(out, "callback_val_loss")
    assert value(out, "artifacts").split(",") == sorted([value(out, "best"), "last"])  # log_model=True: at the end
    assert (cwd / "mlflow.db").is_file()


def check_profiler_simple(out: str, cwd: Path, world: int) -> None:
    assert "FIT Profiler Report" in out
    rows = re.findall(r"^\| run_training_batch\s+\|\s+\S+\s+\|\s+(\d+)\s+\|", out, re.MULTILINE)
    assert rows and all(int(calls) == 8 // world for calls in rows)
    names = ["fit-perf_logs.txt"] if world == 1 else [f"fit-perf_logs-{rank}.txt" for rank in range(world)]
    for name in names:  # under DDP each rank's report, none overwritten
        assert (cwd / name).read_text().startswith("FIT Profiler Report")


def check_fast_dev_run(out: str, cwd: Path, world: int) -> None:
    assert "fast_dev_run=True seen={'train': 1, 'val': 1, 'test': 1} global_step=1" in out
    assert "fast_dev_run=3 seen={'train': 3, 'val': 3, 'test': 3} global_step=3" in out
    assert "files written: []" in out  # no logs, no checkpoints


def check_lightning_cli(out: str, cwd: Path, world: int) -> None:
    # the config's values, and LightningCLI's record of what rebuilds the module from a checkpoint
    instantiator = "'_instantiator': 'lightning.pytorch.cli.instantiate_module'"
    assert "hparams={'out_dim': 10, 'hidden_dim': 16, " + instantiator + "}" in out
    assert "optimizer=Adam lr=0.001250" in out  # lr 0.01 halved by StepLR after each of 3 epochs
    assert "scheduler=StepLR epochs=3" in out
    saved = yaml.safe_load((cwd / value(out, "log_dir") / "config.yaml").read_text())
    assert saved["seed_everything"] == 1234 and saved["trainer"]["enable_progress_bar"] is False


def check_prediction_writer(out: str, cwd: Path, world: int) -> None:
    assert (
        value(out, "files")
        == str(sorted(f"{k}_{r}.pt" for r in range(world) for k in ("batch_indices", "predictions"))).split(" ")[0]
    )
    torch.manual_seed(0)
    x = torch.randn(50, 4)
    seen: list[int] = []
    for rank in range(world):
        predictions = torch.load(cwd / "pred_path" / f"predictions_{rank}.pt")
        (indices,) = torch.load(cwd / "pred_path" / f"batch_indices_{rank}.pt")  # one predict loader
        for batch, idx in zip(predictions, indices):
            assert torch.allclose(batch.squeeze(1), x[idx].sum(dim=1), atol=0.5)
            seen += idx
    assert sorted(seen) == list(range(50))  # every sample predicted exactly once, across the ranks


def check_checkpoint_early_stopping(out: str, cwd: Path, world: int) -> None:
    assert int(value(out, "current_epoch")) < 50  # early stopping stopped the run
    assert float(value(out, "test_loss")) < 1.0
    assert "reloaded hidden_dim=64 learning_rate=0.05" in out
    assert "datamodule hparams={'batch_size': 16, 'noise': 0.5}" in out


def check_step_without_batch_idx(out: str, cwd: Path, world: int) -> None:
    assert int(value(out, "global_step")) == 4 // world


def check_rank_zero_grad_norm(out: str, cwd: Path, world: int) -> None:
    # rank_zero_only.rank is each process's global rank once the strategy is up; the helpers run on rank 0 only
    for rank in range(world):
        assert f"rank={rank} rank_zero_only.rank={rank} grad_keys=" in out
    assert len(re.findall(r"^report from pid=\d+ global_step=(\d+)", out, re.MULTILINE)) == 1
    assert int(value(out, "global_step")) == 16 // world
    assert f"info: rank_zero_only.rank=0 world_size={world}" in out and out.count("info: rank_zero_only") == 1
    assert out.count("UserWarning: warning: printed once") == 1
    assert "'grad_2.0_norm/0.weight'" in out and "'grad_2.0_norm_total'" in out
    assert math.isfinite(float(value(out, "grad_norm_total")))


def check_tuner(out: str, cwd: Path, world: int) -> None:
    if world == 1:  # 2, 4, ... 128 (the dataset's length) fit; binsearch's 5% margin: 121, as Lightning finds
        assert "batch_size=121 datamodule.batch_size=121" in out
    batches = -(-128 // (121 if world == 1 else 4 * world))
    assert int(value(out, "global_step")) == 30 * batches
    suggestion = float(value(out, "suggestion"))
    assert 1e-5 < suggestion < 1.0 and value(out, "model_lr") == value(out, "suggestion")
    assert 11 < int(value(out, "points")) <= 60
    assert not list(cwd.glob(".lr_find*")) and not list(cwd.glob("runs"))  # no temporary files, no logs


def check_accumulation_device_stats(out: str, cwd: Path, world: int) -> None:
    for epoch, factor in enumerate([1, 2, 4]):
        assert out.count(f"epoch={epoch} accumulate_grad_batches={factor}") == 1
    batches = 8 // world
    assert int(value(out, "global_step")) == batches + batches // 2 + -(-batches // 4)
    hooks = ("on_train_batch_end", "on_train_batch_start")
    stats = [
        f"'DeviceStatsMonitor.{h}/{k}'" for h in hooks for k in ("cpu_percent", "cpu_swap_percent", "cpu_vm_percent")
    ]
    assert f"device_stats=[{', '.join(stats)}]" in out


def _bar_lines(out: str, world: int) -> None:
    batches, val = -(-100 // world // 4), 24 // world // 4
    for epoch in range(2):  # a log file gets each epoch's end at 100%, with only the prog_bar values
        assert re.search(
            rf"^Epoch {epoch}: 100% {batches}/{batches} \[.*, v_num=\d+, train_loss=\S+, val_loss=\S+\]$", out, re.M
        )
    assert len(re.findall(rf"^Validation DataLoader 0: 100% {val}/{val} ", out, re.MULTILINE)) == 2
    assert re.search(r"^Sanity Checking DataLoader 0: 100% 2/2 ", out, re.MULTILINE)


def check_tqdm_progress_bar(out: str, cwd: Path, world: int) -> None:
    _bar_lines(out, world)
    assert "bar=TQDMProgressBar refresh_rate=10" in out


def check_rich_progress_bar(out: str, cwd: Path, world: int) -> None:
    # rich draws its own bars: off a terminal, each epoch's final frame, metrics in columns under v_num
    batches = -(-100 // world // 4)
    for epoch in range(2):
        assert re.search(rf"^Epoch {epoch}/1 +━+ {batches}/{batches} .* v_num: \S+", out, re.M), out
    assert len(re.findall(r"^ +(?:\S+ +)?train_loss: \d", out, re.M)) == 2
    assert len(re.findall(r"^ +val_loss: \d", out, re.M)) == 2
    assert "Sanity Checking" not in out and "Validation DataLoader" not in out  # rich's transient eval bars
    assert "bar=RichProgressBar" in out


def check_shared_datamodule(out: str, cwd: Path, world: int) -> None:
    # the GAN does not validate: Lightning's warning, no val_loss; the classifier validates
    skipped = "warnings=['You passed in a `val_dataloader` but have no `validation_step`. Skipping val loop.']"
    gan = re.search(r"^GAN: global_step=(\d+) metrics=(.*)$", out, re.MULTILINE)
    assert gan and int(gan[1]) == 2 * 2 * (256 // 32 // world) and "val" not in gan[2]
    assert re.search(rf"^logger=TensorBoardLogger {re.escape(skipped)}$", out, re.MULTILINE)
    classifier = r"^Classifier: global_step=\d+ metrics=\{'train_loss': \S+, 'train_loss_epoch': \S+, 'train_loss_step'"
    assert re.search(classifier + r": \S+, 'val_loss': \S+\}$", out, re.MULTILINE)
    assert ("parallel: num_processes=2" in out) == (world == 2)
    events = list(cwd.glob("lightning_logs/version_0/events.out.tfevents.*"))  # the GAN's run, rank zero's only
    assert len(events) == 1


def check_random_transforms_limit(out: str, cwd: Path, world: int) -> None:
    # 2 epochs of 3 batches of 4 samples on each rank: 24 reads, as under Lightning (never a 4th batch)
    for rank in range(world):
        assert f"rank={rank} reads=24 global_step=6" in out


def check_cli_logo(out: str, cwd: Path, world: int) -> None:
    assert "\033[0;35m" in out  # the logo, in Lightning's magenta frame
    errors = [float(e) for e in re.findall(r"^epoch=\d reconstruction_error=(\S+)$", out, re.MULTILINE)]
    assert len(errors) == 3 and errors[-1] < errors[0]  # once per epoch, rank zero only
    assert re.search(r"^tensor\(\[\[", out, re.MULTILINE)  # predictions[0] from the best checkpoint


def check_demos_bug_report(out: str, cwd: Path, world: int) -> None:
    assert f"boring: global_step={4} test=" in out
    lr = float(value(out, f"datamodule: global_step={64 // world} lr"))
    assert lr == pytest.approx(0.01)  # StepLR(step_size=1, gamma=0.1) stepped after the one epoch
    match = re.search(r"^transformer: vocab=(\d+) samples=(\d+) val_loss=(\S+)$", out, re.MULTILINE)
    assert match and int(match[1]) == 51 and math.isfinite(float(match[3]))  # 50 words and <eos>


CHECKS: dict[str, Callable[[str, Path, int], None]] = {
    name.removeprefix("check_"): fn for name, fn in globals().items() if name.startswith("check_")
}


def test_every_script_has_a_check() -> None:
    assert sorted(CHECKS) == script_names() and set(MISSING) | FAST <= set(CHECKS)


def run_script(name: str, tmp_path: Path, world: int) -> None:
    args = script_args(name, world)
    done = run_python([str(SCRIPTS / f"{name}.py"), *args], env=clean_env(), cwd=tmp_path, timeout=240)
    assert done.returncode == 0, done.output
    CHECKS[name](done.output, tmp_path, world)


def params(single: bool) -> list[object]:
    marks = {name: [] for name in script_names()}
    for name in marks:
        if name in MISSING:
            marks[name].append(pytest.mark.xfail(strict=True, reason=MISSING[name]))
        if not single or name not in FAST:
            marks[name].append(pytest.mark.slow)
    return [pytest.param(name, marks=marks[name]) for name in marks]


@pytest.mark.parametrize("name", params(single=True))
def test_script_on_one_device(name: str, tmp_path: Path) -> None:
    run_script(name, tmp_path, world=1)


@pytest.mark.parametrize("name", params(single=False))
def test_script_on_two_ddp_ranks(name: str, tmp_path: Path) -> None:
    run_script(name, tmp_path, world=2)
