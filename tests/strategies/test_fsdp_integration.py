"""FSDPStrategy and sharded (DCP) checkpoints.

Unit tests run in one process (DCP saves and loads without a process group there); the slow ones
self-launch 2 CPU ranks on gloo through ``tests/scripts/fsdp_job.py``.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tests.helpers import clean_env
from trainer.checkpoint import CheckpointError, clean_stale_temporaries
from trainer.checkpoint.__main__ import main as checkpoint_cli
from trainer.checkpoint.optimizer_names import index_keyed_optimizer_state, name_keyed_optimizer_state
from trainer.checkpoint.sharded import (
    is_complete_checkpoint_dir,
    link_any_checkpoint,
    load_sharded,
    remove_checkpoint,
    save_sharded,
)
from trainer.strategies import SingleDeviceStrategy, strategy_class
from trainer.strategies.fsdp import FSDPStrategy
from trainer.strategies.fsdp_policies import size_plan

SCRIPT = Path(__file__).parents[1] / "scripts" / "fsdp_job.py"


# ---- one process ---------------------------------------------------------------------------------------
def test_registered_and_checks_its_options() -> None:
    assert strategy_class("fsdp") is FSDPStrategy
    with pytest.raises(ValueError, match="sharding='ring'"):
        FSDPStrategy(sharding="ring")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="strategy='fsdp' runs on"):
        FSDPStrategy().configure("mps", [0, 1])


def test_shard_plan_takes_large_submodules_innermost_first() -> None:
    block = nn.Sequential(nn.Linear(10, 10), nn.Linear(10, 1))  # 110 and 11 parameters
    root = nn.Sequential(block, nn.Linear(100, 2))  # 202
    assert size_plan(root, 100) == [root[1], block[0]]  # block's remaining 11 stay with the root
    assert size_plan(root, 1000) == []


def test_empty_init_builds_on_the_meta_device_only_where_a_strategy_gives_it_memory() -> None:
    """Under FSDP the module has shapes and no memory until setup; elsewhere empty_init changes nothing. materialize
    runs reset_parameters() and names a layer that has none (its memory stays uninitialised)."""
    import trainer
    from trainer.strategies.meta_init import has_meta_tensors, materialize

    sharded = trainer.Trainer(strategy="fsdp", accelerator="cpu", devices=2, logger=False)
    with sharded.init_module(empty_init=True):
        model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
    assert has_meta_tensors(model) and sharded.strategy.loads_weights_after_setup(model)
    with trainer.Trainer(accelerator="cpu", devices=1, logger=False).init_module(empty_init=True):
        eager = nn.Linear(3, 4)
    assert not has_meta_tensors(eager) and eager.weight.abs().sum() > 0

    class NoReset(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.empty(2, device="meta"))

    model.append(NoReset())
    with pytest.warns(UserWarning, match="uninitialized memory because .* `reset_parameters\\(\\)`.*: NoReset"):
        materialize(model, torch.device("cpu"))
    assert not has_meta_tensors(model) and torch.equal(model[1].weight, torch.ones(4))  # LayerNorm reset


def _checkpoint() -> tuple[nn.Module, torch.optim.Optimizer, dict[str, Any]]:
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(2, 3)).sum().backward()
    opt.step()
    state = name_keyed_optimizer_state(model, opt, opt.state_dict())
    return model, opt, {"state_dict": model.state_dict(), "optimizer_states": [state], "epoch": 3, "rng": [1, 2]}


def test_sharded_directory_round_trip_and_layout(tmp_path: Path) -> None:
    model, opt, checkpoint = _checkpoint()
    path = tmp_path / "a.ckpt"
    save_sharded(checkpoint, path, SingleDeviceStrategy())
    assert is_complete_checkpoint_dir(path)
    assert {".metadata", "meta.pt"} <= set(os.listdir(path))
    assert [p.name for p in tmp_path.iterdir()] == ["a.ckpt"]  # no temporary left
    loaded = load_sharded(path)
    assert loaded["epoch"] == 3 and loaded["rng"] == [1, 2]
    for key, value in model.state_dict().items():
        assert torch.equal(loaded["state_dict"][key], value)
    again = torch.optim.AdamW(model.parameters(), lr=0.1)
    again.load_state_dict(index_keyed_optimizer_state(model, again, loaded["optimizer_states"][0]))
    assert torch.equal(again.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])


def test_saving_over_a_checkpoint_replaces_it_whole(tmp_path: Path) -> None:
    _, _, checkpoint = _checkpoint()
    path = tmp_path / "last.ckpt"
    save_sharded(checkpoint, path, SingleDeviceStrategy())
    save_sharded({**checkpoint, "epoch": 4}, path, SingleDeviceStrategy())
    assert load_sharded(path)["epoch"] == 4
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_a_failed_save_leaves_the_previous_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, checkpoint = _checkpoint()
    path = tmp_path / "last.ckpt"
    save_sharded(checkpoint, path, SingleDeviceStrategy())

    def killed(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("torch.distributed.checkpoint.save", killed)
    with pytest.raises(KeyboardInterrupt):
        save_sharded({**checkpoint, "epoch": 9}, path, SingleDeviceStrategy())
    assert load_sharded(path)["epoch"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_a_sharded_directory_loads_with_load_from_checkpoint(tmp_path: Path) -> None:
    import trainer

    class Tiny(trainer.Module):
        def __init__(self, width: int = 3) -> None:
            super().__init__()
            self.lin = nn.Linear(width, 1)

    module = Tiny(width=5)
    save_sharded(
        {"state_dict": module.state_dict(), "hyper_parameters": {"width": 5}},
        tmp_path / "t.ckpt",
        SingleDeviceStrategy(),
    )
    loaded = Tiny.load_from_checkpoint(tmp_path / "t.ckpt")
    assert torch.equal(loaded.lin.weight, module.lin.weight)


def test_incomplete_or_missing_directories_say_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        load_sharded(tmp_path / "nothere.ckpt")
    torn = tmp_path / "torn.ckpt"
    torn.mkdir()
    (torn / "meta.pt").write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"has no \.metadata"):
        load_sharded(torn)
    assert not is_complete_checkpoint_dir(torn)


def test_stale_temporary_directories_of_dead_writers_are_removed(tmp_path: Path) -> None:
    dead = tmp_path / ".x.ckpt.tmp-999999999-host"
    dead.mkdir()
    (dead / "__0_0.distcp").write_bytes(b"partial")
    os.utime(dead, (0, 0))
    assert clean_stale_temporaries(tmp_path) == [dead]
    assert not dead.exists()


def test_dcp_metadata_with_a_foreign_global_is_refused_unexecuted(tmp_path: Path) -> None:
    _, _, checkpoint = _checkpoint()
    path = tmp_path / "evil.ckpt"
    save_sharded(checkpoint, path, SingleDeviceStrategy())
    marker = tmp_path / "ran"
    (path / ".metadata").write_bytes(pickle.dumps(_Evil(str(marker))))
    with pytest.raises(CheckpointError, match="refused DCP metadata"):
        load_sharded(path)
    assert not marker.exists()


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.system, (f"touch {self.marker}",))


def test_top_k_helpers_link_and_remove_directories(tmp_path: Path) -> None:
    _, _, checkpoint = _checkpoint()
    best = tmp_path / "epoch=1.ckpt"
    save_sharded(checkpoint, best, SingleDeviceStrategy())
    last = tmp_path / "last.ckpt"
    link_any_checkpoint(best, last)
    remove_checkpoint(best)
    assert not best.exists() and load_sharded(last)["epoch"] == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_consolidate_writes_weights_the_bare_module_loads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, _, checkpoint = _checkpoint()
    save_sharded(checkpoint, tmp_path / "a.ckpt", SingleDeviceStrategy())
    assert checkpoint_cli(["consolidate", str(tmp_path / "a.ckpt"), str(tmp_path / "w.pt")]) == 0
    bare = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 1))
    bare.load_state_dict(torch.load(tmp_path / "w.pt", weights_only=True))
    assert all(torch.equal(a, b) for a, b in zip(bare.parameters(), model.parameters()))
    assert checkpoint_cli(["consolidate", str(tmp_path / "none.ckpt"), str(tmp_path / "x.pt")]) == 1
    assert "not found" in capsys.readouterr().err


# ---- two ranks (gloo) ----------------------------------------------------------------------------------
def job(out: Path, tag: str, *args: str) -> dict[int, dict[str, Any]]:
    env = clean_env(PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(out), tag, *args],
        env=env,
        cwd=out,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    files = sorted(out.glob(f"{tag}-rank*.pt"))
    return {int(f.stem.rsplit("rank", 1)[1]): torch.load(f, weights_only=True) for f in files}


def max_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    assert a["params"].keys() == b["params"].keys()
    return max((a["params"][k] - b["params"][k]).abs().max().item() for k in a["params"])


@pytest.mark.slow
def test_fsdp_matches_ddp_with_adamw_schedule_accumulation_and_clipping(tmp_path: Path) -> None:
    fsdp, ddp = job(tmp_path, "fsdp"), job(tmp_path, "ddp", "--strategy", "ddp")
    assert sorted(fsdp) == [0, 1] and fsdp[0]["global_step"] == ddp[0]["global_step"] == 8
    assert max_diff(fsdp[0], fsdp[1]) == 0  # the ranks gathered the same full weights
    assert max_diff(fsdp[0], ddp[0]) < 1e-5
    assert abs(fsdp[0]["metrics"]["val_loss"] - ddp[0]["metrics"]["val_loss"]) < 1e-5  # evaluation through FSDP
    options = job(tmp_path, "options", "--hybrid", "--ac", "--offload")  # same math, other layouts
    assert max_diff(options[0], fsdp[0]) < 1e-6
    own = job(tmp_path, "own", "--configure-model")  # configure_model shards the layers itself
    assert max_diff(own[0], fsdp[0]) < 1e-6
    bf16 = job(tmp_path, "bf16", "--precision", "bf16-mixed")
    assert all(v.dtype == torch.float32 for v in bf16[0]["params"].values())  # fp32 master weights
    assert max_diff(bf16[0], fsdp[0]) < 0.2


@pytest.mark.slow
def test_fsdp_changes_accumulation_between_epochs_as_ddp_does(tmp_path: Path) -> None:
    """GradientAccumulationScheduler under FSDP: each micro-batch's sync is skipped on its own, nothing is fixed
    at set-up, so a factor changed at an epoch start applies as under DDP (Lightning refuses only DeepSpeed)."""
    fsdp, ddp = job(tmp_path, "fsdp", "--schedule"), job(tmp_path, "ddp", "--schedule", "--strategy", "ddp")
    assert fsdp[0]["global_step"] == ddp[0]["global_step"] == 8 + 3  # epoch 0: 1 per step; epoch 1: 3, 3, 2
    assert max_diff(fsdp[0], ddp[0]) < 1e-5


@pytest.mark.slow
def test_fsdp_manual_optimization_matches_ddp(tmp_path: Path) -> None:
    fsdp, ddp = job(tmp_path, "fsdp", "--manual"), job(tmp_path, "ddp", "--manual", "--strategy", "ddp")
    assert fsdp[0]["global_step"] == ddp[0]["global_step"] == 32
    assert max_diff(fsdp[0], ddp[0]) < 1e-5


@pytest.mark.slow
def test_sharded_checkpoint_resumes_bitwise_mid_epoch_and_across_strategies(tmp_path: Path) -> None:
    drop = ("--dropout", "0.2")
    full = job(tmp_path, "full", *drop, "--save-at", "3")  # saves full-step3.ckpt/ mid-epoch
    assert is_complete_checkpoint_dir(tmp_path / "full-step3.ckpt")
    resumed = job(tmp_path, "resumed", *drop, "--resume", "full-step3.ckpt")
    assert (
        max_diff(resumed[0], full[0]) == 0 and resumed[0]["losses"] == full[0]["losses"][-len(resumed[0]["losses"]) :]
    )
    into_own = job(tmp_path, "into-own", *drop, "--configure-model", "--resume", "full-step3.ckpt")
    assert max_diff(into_own[0], full[0]) == 0  # full weights scattered into the module's own shards
    into_ddp = job(tmp_path, "into-ddp", *drop, "--strategy", "ddp", "--resume", "full-step3.ckpt")
    assert max_diff(into_ddp[0], full[0]) < 1e-5
    # 2 -> 1 -> 2 ranks: a different world size resumes (not bitwise: the data order changes)
    one = job(tmp_path, "one", *drop, "--devices", "1", "--resume", "full-step3.ckpt", "--save-at", "5")
    assert one[0]["global_step"] == 8 and one[0]["world_size"] == 1
    two = job(tmp_path, "two", *drop, "--resume", "one-step5.ckpt")
    assert two[0]["global_step"] == 8 and max_diff(two[0], two[1]) == 0
    for stage in ("validate", "predict"):  # into one device, no process group
        single = job(
            tmp_path, stage, "--strategy", "single", "--devices", "1", "--stage", stage, "--resume", "one-step5.ckpt"
        )
        assert stage in single[0]
    ddp = job(tmp_path, "ddp", *drop, "--strategy", "ddp", "--save-at", "3")
    from_ddp = job(tmp_path, "from-ddp", *drop, "--resume", "ddp-step3.ckpt")
    assert max_diff(from_ddp[0], ddp[0]) < 1e-5


@pytest.mark.slow
def test_model_checkpoint_keeps_directories_and_full_state_option(tmp_path: Path) -> None:
    job(tmp_path, "topk", "--top-k", "1", "--async-save")
    kept = sorted(p.name for p in (tmp_path / "ckpts").iterdir())
    assert len(kept) == 2 and "last.ckpt" in kept  # the worse epoch's directory was removed
    assert all(is_complete_checkpoint_dir(tmp_path / "ckpts" / name) for name in kept)
    again = job(tmp_path, "again", "--top-k", "1", "--resume", "last")  # finds ckpts/last.ckpt/
    assert again[0]["global_step"] == 8
    full = job(tmp_path, "full", "--full-state", "--save-at", "3")
    assert (tmp_path / "full-step3.ckpt").is_file()  # one gathered file, written by rank 0
    resumed = job(tmp_path, "resumed", "--full-state", "--resume", "full-step3.ckpt")
    assert max_diff(resumed[0], full[0]) == 0


# ---- Lightning's options (tests/strategies/test_fsdp_options.py checks them in one process) ----------
@pytest.fixture(scope="module")
def one_device(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The same training on one device, batches in order: 2 ranks x 4 samples are its batch of 8."""
    out = tmp_path_factory.mktemp("one")
    return job(out, "one", "--strategy", "single", "--devices", "1", "--no-shuffle")[0]


@pytest.mark.slow
def test_auto_wrap_and_activation_checkpointing_policies_keep_one_devices_math(
    tmp_path: Path, one_device: dict[str, Any]
) -> None:
    ranks = job(tmp_path, "policies", "--wrap-policy", "--ac-policy", "--no-shuffle")
    assert ranks[0]["wrapped"] == ["", "net.0", "net.3", "net.5"]  # each Linear (the size rule leaves net.5 out)
    # every training forward of a Linear runs again in backward; evaluation has no backward
    train_calls = 3 * len(one_device["losses"])
    assert ranks[0]["linear_calls"] - one_device["linear_calls"] == train_calls
    assert max_diff(ranks[0], one_device) < 1e-6
    means = [(a + b) / 2 for a, b in zip(ranks[0]["losses"], ranks[1]["losses"])]  # each rank: half the batch
    assert means == pytest.approx(one_device["losses"], abs=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("tag", "args", "mesh", "gathered", "share"),
    [
        ("grad-op", ["SHARD_GRAD_OP", "--full-state", "--checkpoint-io", "--save-at", "3"], (2,), True, 0.5),
        ("no-shard", ["no_shard"], (2, 1), True, 1.0),
        ("hybrid", ["enum:HYBRID_SHARD", "--mesh", "2,1"], (2, 1), False, 1.0),
    ],
)
def test_sharding_strategies_lay_parameters_out_as_named_with_one_devices_math(
    tmp_path: Path,
    one_device: dict[str, Any],
    tag: str,
    args: list[str],
    mesh: tuple[int, ...],
    gathered: bool,
    share: float,
) -> None:
    ranks = job(tmp_path, tag, "--no-shuffle", "--sharding-strategy", *args)
    assert ranks[0]["mesh"] == mesh  # hybrid: (replicate, shard); NO_SHARD replicates over (world, 1)
    assert ranks[0]["gathered_after_forward"][0] is gathered  # SHARD_GRAD_OP keeps parameters until backward
    assert ranks[0]["local_share"] == share  # the part of a sharded layer's weight each rank holds
    assert max_diff(ranks[0], one_device) < 1e-6
    if "--checkpoint-io" in args:  # the user's CheckpointIO wrote the full checkpoint, once (rank 0)
        assert (tmp_path / f"{tag}-io.txt").read_text() == f"{tag}-step3.ckpt\n"
        assert (tmp_path / f"{tag}-step3.ckpt").is_file()


@pytest.mark.slow
def test_a_model_built_on_the_meta_device_is_sharded_then_given_memory(tmp_path: Path) -> None:
    """trainer.init_module(empty_init=True) under FSDP: built on the meta device, sharded, then each rank's shards get
    memory and reset_parameters(); a checkpoint's weights load after that, in fit (a bitwise resume) and in validate
    (the checkpoint's weights, not fresh ones)."""
    meta = job(tmp_path, "meta", "--empty-init", "--save-at", "3")
    assert meta[0]["built_on_meta"] and meta[0]["meta_left"] == [] and meta[0]["local_share"] == 0.5
    losses = meta[0]["losses"]
    assert max_diff(meta[0], meta[1]) == 0 and losses[-1] < losses[0] < 10  # one model; each rank its own batches
    resumed = job(tmp_path, "resumed", "--empty-init", "--resume", "meta-step3.ckpt")
    assert resumed[0]["built_on_meta"] and max_diff(resumed[0], meta[0]) == 0
    assert resumed[0]["losses"] == losses[-len(resumed[0]["losses"]) :]
    validated = job(tmp_path, "validated", "--empty-init", "--stage", "validate", "--resume", "meta-step3.ckpt")
    saved = load_sharded(tmp_path / "meta-step3.ckpt")["state_dict"]
    assert validated[0]["built_on_meta"] and validated[0]["params"].keys() == saved.keys()
    assert all(torch.equal(validated[0]["params"][k], saved[k]) for k in saved)
