"""The recipes end to end: a few steps on tiny generated data, single process and 2-rank DDP, resume, predict.

The parts (UNet, dataset, generator, dice, ShuffleNet) are tested in test_recipe_parts.py; here the
command lines a user runs are driven through each recipe's ``main`` (in-process) or as a script (DDP).
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from recipes import shufflenet_synthetic, unet_carvana
from recipes.carvana import UNet, generate_synthetic_carvana
from recipes.shufflenet import ShuffleNet
from recipes.unet_carvana import CarvanaData, UNetSegmentation
from trainer.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parent.parent
H, W = 48, 64  # generated image size; loaded at scale 0.5 -> 24 x 32 (>= 16, enough for four poolings)


# The tests read metrics.csv: a CSVLogger, which the default logger is only where tensorboard is not installed.
CSV_LOGGER = ["--trainer.logger", "trainer.loggers.CSVLogger"]


def unet_args(tmp: Path, *extra: str) -> list[str]:
    """A UNet command line that trains for seconds: 24 images of 48x64 at half scale, base width 4."""
    return [
        *("--data.root", str(tmp / "carvana"), "--data.n_images", "24", "--data.image_size", f"[{H},{W}]"),
        *("--data.scale", "0.5", "--data.batch_size", "4", "--model.base", "4"),
        *("--trainer.limit_train_batches", "3", "--trainer.log_every_n_steps", "1"),
        *("--trainer.default_root_dir", str(tmp / "runs"), "--trainer.enable_progress_bar", "false"),
        *CSV_LOGGER,
        "--trainer.logger.save_dir",
        str(tmp / "runs"),
        *extra,
    ]


SHUFFLENET_ARGS = [
    *("--trainer.max_epochs", "1", "--trainer.limit_train_batches", "3", "--trainer.enable_progress_bar", "false"),
    *CSV_LOGGER,
    *("--data.n_train", "64", "--data.n_val", "32", "--data.batch_size", "16"),
]


def run_in_process(main: Any, args: list[str], cwd: Path) -> str:
    """Run a recipe's ``main(args)`` in ``cwd``; return what it printed."""
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        mp.chdir(cwd)
        main(args)
    return out.getvalue()


def run_script(script: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a recipe as ``python recipes/<script> ...`` with no launcher variables inherited from this process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "recipes" / script), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def printed(pattern: str, text: str) -> str:
    match = re.search(pattern, text, re.MULTILINE)
    assert match, f"{pattern!r} not in output:\n{text}"
    return match.group(1)


def read_metrics(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def run_folders(runs: Path) -> list[str]:
    return sorted(p.name for p in (runs / "lightning_logs").iterdir())


@pytest.fixture(scope="module")
def unet_fit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One finished one-epoch UNet fit, shared read-only: (its tmp folder, what it printed)."""
    tmp = tmp_path_factory.mktemp("unet")
    return tmp, run_in_process(unet_carvana.main, ["fit", *unet_args(tmp, "--trainer.max_epochs", "1")], tmp)


# --- UNet / Carvana, single process -----------------------------------------------------------------


def test_unet_fit_prints_a_summary_whose_files_exist(unet_fit: tuple[Path, str]) -> None:
    tmp, out = unet_fit
    dice = float(printed(r"^validation dice : ([\d.]+)$", out))
    assert 0.0 <= dice <= 1.0
    last = Path(printed(r"^checkpoints\s+: .* \(last: (.+)\)$", out))
    assert last.is_file() and last.name == "last.ckpt"
    assert load_checkpoint(last)["global_step"] == 3  # limit_train_batches

    run = tmp / "runs" / "lightning_logs" / "version_0"
    assert last.parent == run / "checkpoints"
    metrics = Path(printed(r"^metrics\s+: (.+)$", out))
    assert metrics == run / "metrics.csv"
    rows = read_metrics(metrics)
    assert {"train_loss", "val_dice"} <= rows[0].keys()
    assert [r["step"] for r in rows if r["train_loss"]] == [
        "0",
        "1",
        "2",
    ]  # Lightning's logger step: the steps before the current one
    assert [float(r["val_dice"]) for r in rows if r["val_dice"]] == [pytest.approx(dice, abs=1e-4)]

    samples = Path(printed(r"^sample masks\s+: (.+)$", out))
    with Image.open(samples / "epoch000-step000003.png") as grid:  # 2 validation images, image | mask | prediction
        assert grid.size == (3 * W // 2, 2 * H // 2)

    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["model"]["base"] == 4 and config["data"]["n_images"] == 24
    assert config["trainer"]["max_epochs"] == 1
    assert len(list((tmp / "carvana" / "imgs").iterdir())) == 24


@pytest.mark.slow  # 10-16 s end to end on 2 cores: moved out of the 6-minute default run
def test_unet_fit_resumes_from_its_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run_in_process(unet_carvana.main, ["fit", *unet_args(tmp_path, "--trainer.max_epochs", "1")], tmp_path)
    run = tmp_path / "runs" / "lightning_logs" / "version_0"
    last = run / "checkpoints" / "last.ckpt"
    assert load_checkpoint(last)["global_step"] == 3

    out = run_in_process(
        unet_carvana.main,
        ["fit", *unet_args(tmp_path, "--trainer.max_epochs", "2", "--ckpt_path", str(last))],
        tmp_path,
    )
    assert "validation dice" in out
    state = load_checkpoint(last)
    assert (state["epoch"], state["global_step"]) == (1, 6)
    assert (run / "checkpoints" / "epoch=1-step=6.ckpt").is_file()
    assert (run / "samples" / "epoch001-step000006.png").is_file()
    # The resumed run kept writing to the first run's metrics: epoch 0 rows, then epoch 1 rows.
    rows = read_metrics(run / "metrics.csv")
    assert [r["step"] for r in rows if r["train_loss"]] == ["0", "1", "2", "3", "4", "5"]
    assert [r["epoch"] for r in rows if r["val_dice"]] == ["0", "1"]

    # "last", as the recipe's docstring suggests, finds that checkpoint under default_root_dir.
    run_in_process(
        unet_carvana.main, ["fit", *unet_args(tmp_path, "--trainer.max_epochs", "3", "--ckpt_path", "last")], tmp_path
    )
    assert load_checkpoint(last)["global_step"] == 9


def test_unet_resumed_fit_writes_its_config_to_the_run_it_continues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run_in_process(unet_carvana.main, ["fit", *unet_args(tmp_path, "--trainer.max_epochs", "1")], tmp_path)
    last = tmp_path / "runs" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    resume = ["fit", *unet_args(tmp_path, "--trainer.max_epochs", "2", "--ckpt_path", str(last))]
    run_in_process(unet_carvana.main, resume, tmp_path)
    assert run_folders(tmp_path / "runs") == ["version_0"]
    config = yaml.safe_load((tmp_path / "runs" / "lightning_logs" / "version_0" / "config.yaml").read_text())
    assert config["trainer"]["max_epochs"] == 2


def constant_output_checkpoint(source: Path, target: Path, car: bool) -> Path:
    """``source`` with the UNet's last 1x1 conv replaced so every pixel is background (or every pixel car)."""
    state = load_checkpoint(source)
    weights = state["state_dict"]
    weights["model.outc.weight"] = torch.zeros_like(weights["model.outc.weight"])
    weights["model.outc.bias"] = torch.tensor([-50.0, 50.0] if car else [50.0, -50.0])
    torch.save(state, target)
    return target


def test_unet_predict_writes_a_mask_per_image_at_its_original_size(
    unet_fit: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    fit_tmp, _ = unet_fit
    images = fit_tmp / "carvana" / "imgs"
    last = fit_tmp / "runs" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    for car in (False, True):  # two checkpoints that must give opposite masks: the weights are really loaded
        ckpt = constant_output_checkpoint(last, tmp_path / f"car{car}.ckpt", car)
        out_dir = tmp_path / f"pred_car{car}"
        args = ["predict", *unet_args(fit_tmp), "--ckpt_path", str(ckpt)]
        run_in_process(
            unet_carvana.main,
            [*args, "--data.predict_dir", str(images), "--model.predict_out_dir", str(out_dir)],
            tmp_path,
        )
        written = sorted(p.name for p in out_dir.iterdir())
        assert written == sorted(f"{p.stem}_mask.png" for p in images.iterdir())
        for name in written:
            with Image.open(out_dir / name) as mask:
                assert (mask.mode, mask.size) == ("L", (W, H))
                assert np.unique(np.asarray(mask)).tolist() == [255 if car else 0]


@pytest.mark.parametrize("source", ["ddp_state_dict", "recipe_checkpoint"])
def test_unet_init_weights_loads_a_prefixed_state_dict_or_a_recipe_checkpoint(
    source: str, unet_fit: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    if source == "ddp_state_dict":  # as a hand-written DDP script saves it: torch.save(ddp_model.state_dict())
        torch.manual_seed(123)
        expected = {k: v + 0.25 if v.is_floating_point() else v for k, v in UNet(base=4).state_dict().items()}
        path = tmp_path / "unet.pt"
        torch.save({"module." + k: v for k, v in expected.items()}, path)
    else:  # fine-tuning from an earlier run of this recipe
        path = unet_fit[0] / "runs" / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
        expected = {k.removeprefix("model."): v for k, v in load_checkpoint(path)["state_dict"].items()}
    loaded = UNetSegmentation(base=4, init_weights=str(path)).model.state_dict()
    assert loaded.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(loaded[key], value), key
    fresh = UNetSegmentation(base=4).model.state_dict()
    assert not torch.equal(fresh["inc.0.weight"], expected["inc.0.weight"])

    # The same through the command line (the flag is typed and reaches the constructor).
    from trainer.cli import CLI

    cli = CLI(
        UNetSegmentation, CarvanaData, args=["fit", *unet_args(tmp_path), "--model.init_weights", str(path)], run=False
    )
    assert torch.equal(cli.model.state_dict()["model.outc.weight"], expected["outc.weight"])


# --- the Carvana DataModule on a generated folder -----------------------------------------------------


def test_carvana_datamodule_generates_splits_and_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    data = CarvanaData(
        root=str(tmp_path / "set"), n_images=20, image_size=(H, W), scale=0.5, val_percent=25, batch_size=4
    )
    data.prepare_data()
    assert len(list((tmp_path / "set" / "imgs").glob("*.jpg"))) == 20
    assert len(list((tmp_path / "set" / "masks").glob("*_mask.gif"))) == 20
    data.setup("fit")
    assert (len(data.train_set), len(data.val_set)) == (15, 5)

    train = list(data.train_dataloader())
    assert [len(b["image"]) for b in train] == [4, 4, 4, 3]
    batch = train[0]
    assert batch["image"].shape == (4, 3, H // 2, W // 2) and batch["image"].dtype == torch.float32
    assert batch["mask"].shape == (4, H // 2, W // 2) and batch["mask"].dtype == torch.int64
    assert set(torch.cat([b["mask"].unique() for b in train]).tolist()) == {0, 1}

    val = list(data.val_dataloader())
    assert [len(b["image"]) for b in val] == [4, 1]
    again = list(data.val_dataloader())  # unshuffled: the same order every epoch
    assert all(torch.equal(a["image"], b["image"]) for a, b in zip(val, again, strict=True))
    assert [len(b["image"]) for b in data.test_dataloader()] == [4, 1]

    data.setup("predict")  # images only: needs no masks
    only = next(iter(data.predict_dataloader()))
    assert only["image"].shape == (1, 3, H // 2, W // 2)
    assert only["id"] == [sorted(p.stem for p in (tmp_path / "set" / "imgs").iterdir())[0]]
    assert [int(s) for s in only["size"]] == [H, W]  # the original size, for writing the mask back


def test_carvana_datamodule_without_generate_reads_only_what_is_there(tmp_path: Path) -> None:
    generate_synthetic_carvana(tmp_path / "set", n_images=8, size=(H, W))
    data = CarvanaData(root=str(tmp_path / "set"), generate=False, n_images=300, val_percent=50, batch_size=8)
    data.prepare_data()
    assert len(list((tmp_path / "set" / "imgs").iterdir())) == 8  # did not top the set up to 300
    data.setup("fit")
    assert (len(data.train_set), len(data.val_set)) == (4, 4)

    empty = CarvanaData(root=str(tmp_path / "missing"), generate=False)
    empty.prepare_data()
    assert not (tmp_path / "missing").exists()
    with pytest.raises(FileNotFoundError):
        empty.setup("fit")


# --- ShuffleNet, single process -----------------------------------------------------------------------


@pytest.fixture
def forward_dtypes(monkeypatch: pytest.MonkeyPatch) -> list[torch.dtype]:
    """The dtype of every ShuffleNet forward's logits in this test."""
    dtypes: list[torch.dtype] = []
    forward = ShuffleNet.forward

    def spy(self: ShuffleNet, x: torch.Tensor) -> torch.Tensor:
        out = forward(self, x)
        dtypes.append(out.dtype)
        return out

    monkeypatch.setattr(ShuffleNet, "forward", spy)
    return dtypes


@pytest.mark.parametrize(("precision", "dtype"), [("32-true", torch.float32), ("bf16-mixed", torch.bfloat16)])
def test_shufflenet_fit_prints_validation_accuracy(
    precision: str,
    dtype: torch.dtype,
    forward_dtypes: list[torch.dtype],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    out = run_in_process(
        shufflenet_synthetic.main, ["fit", *SHUFFLENET_ARGS, "--trainer.precision", precision], tmp_path
    )
    assert 0.0 <= float(printed(r"^validation accuracy: ([\d.]+)$", out)) <= 1.0
    assert forward_dtypes and set(forward_dtypes) == {dtype}  # bf16-mixed really ran under autocast
    run = tmp_path / "runs" / "lightning_logs" / "version_0"
    state = load_checkpoint(run / "checkpoints" / "last.ckpt")
    assert state["global_step"] == 3
    assert all(v.dtype == torch.float32 for k, v in state["state_dict"].items() if v.is_floating_point())
    rows = read_metrics(run / "metrics.csv")
    assert any(r["val_acc"] for r in rows)
    assert yaml.safe_load((run / "config.yaml").read_text())["trainer"]["precision"] == precision


# --- 2-rank DDP, as the user runs it ---------------------------------------------------------------------

DDP = ["--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu"]


@pytest.mark.slow
def test_unet_fit_under_two_rank_ddp(tmp_path: Path) -> None:
    proc = run_script("unet_carvana.py", ["fit", *unet_args(tmp_path, "--trainer.max_epochs", "1"), *DDP], tmp_path)
    assert proc.stdout.count("validation dice") == 1  # rank 0 only
    assert run_folders(tmp_path / "runs") == ["version_0"]  # rank 1 made no folder of its own
    run = tmp_path / "runs" / "lightning_logs" / "version_0"
    state = load_checkpoint(run / "checkpoints" / "last.ckpt")
    assert state["loops"]["data"]["world_size"] == 2
    assert state["global_step"] == 3  # 22 training images / (4 per rank x 2 ranks) -> 3 batches
    assert {"train_loss", "val_dice"} <= read_metrics(run / "metrics.csv")[0].keys()
    assert (run / "samples" / "epoch000-step000003.png").is_file() and (run / "config.yaml").is_file()
    files = sorted(p.name for p in (tmp_path / "carvana").rglob("*") if p.is_file())
    assert len(files) == 48 and not [f for f in files if f.endswith(".tmp")]  # generated once, completely


@pytest.mark.slow
def test_shufflenet_fit_under_two_rank_ddp(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    proc = run_script(
        "shufflenet_synthetic.py", ["fit", *SHUFFLENET_ARGS, *DDP, "--trainer.default_root_dir", str(runs)], tmp_path
    )
    assert proc.stdout.count("validation accuracy") == 1
    assert run_folders(runs) == ["version_0"]
    state = load_checkpoint(runs / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt")
    assert state["loops"]["data"]["world_size"] == 2
    assert state["global_step"] == 2  # 64 images / (16 per rank x 2 ranks): each rank got half
