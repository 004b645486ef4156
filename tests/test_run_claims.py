"""Claims (trainer/claims.py): a run folder or checkpoint name is taken by exactly one run, however runs race.

Runs started together are in tests/test_runs_together.py; here each claim is raced by many threads and
processes held on a barrier, and each piece that uses a claim is checked on its own.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
from tests.models import Regressor, loader, quiet, regression_data
from trainer import claims
from trainer.claims import RunNames, claim_file, claim_for_run, claim_name, claim_version
from trainer.loggers import CSVLogger
from trainer.loggers.folder import RunFolder

RACERS = 16


def _race_version(root: str, barrier: Any, out: Any) -> None:
    """Every racer lists the folder before any creates one, as when a listing is stale (an NFS client's cache):
    only the exclusive create can tell them apart."""
    stale = claims.next_version(root)
    claims.next_version = lambda root: stale  # this process only (forked)
    barrier.wait()
    out.put(claim_version(root))


def _never(path: Path) -> bool:
    return False


def _race_name(folder: str, barrier: Any, out: Any) -> None:
    barrier.wait()
    out.put((claim_file(os.path.join(folder, "last.ckpt")), str(claim_name(folder, "best", ".ckpt", _never)[0])))


def _in_processes(target: Any, arg: str) -> list[Any]:
    """``target(arg, barrier, queue)`` in RACERS processes released together; what each put in the queue."""
    ctx = multiprocessing.get_context("fork")  # no torch work in the children: fork is safe and fast
    barrier, out = ctx.Barrier(RACERS), ctx.Queue()
    procs = [ctx.Process(target=target, args=(arg, barrier, out)) for _ in range(RACERS)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    return results


def test_racing_processes_each_claim_their_own_version(tmp_path: Path) -> None:
    (tmp_path / "lightning_logs" / "version_2").mkdir(parents=True)  # an earlier run: the racers start above it
    versions = _in_processes(_race_version, str(tmp_path / "lightning_logs"))
    assert sorted(versions) == list(range(3, 3 + RACERS))
    assert sorted(os.listdir(tmp_path / "lightning_logs")) == sorted(f"version_{v}" for v in [2, *versions])


def test_racing_threads_each_claim_their_own_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claims, "next_version", lambda root: 0)  # a listing that never shows the others' folders
    barrier, versions = threading.Barrier(RACERS * 2), []

    def claim() -> None:
        barrier.wait()
        versions.append(claim_version(str(tmp_path)))

    threads = [threading.Thread(target=claim) for _ in range(RACERS * 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(versions) == list(range(RACERS * 2))


def test_racing_processes_claim_a_checkpoint_name_once(tmp_path: Path) -> None:
    results = _in_processes(_race_name, str(tmp_path))
    assert sum(won for won, _ in results) == 1  # one run owns last.ckpt
    names = [Path(name).name for _, name in results]
    assert sorted(names) == sorted(["best.ckpt"] + [f"best-v{v}.ckpt" for v in range(1, RACERS)])  # all distinct
    markers = [p for p in os.listdir(tmp_path) if p.startswith(".")]  # each claim made keeps its marker until saved
    assert len(markers) == 1 + RACERS and all(".claim-" in p for p in markers)  # a lost race leaves none


def test_claim_without_hard_links_creates_exclusively(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_links(src: str, dst: str) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)  # FAT, some SMB mounts
    assert claim_file(tmp_path / "a.ckpt") is True
    assert claim_file(tmp_path / "a.ckpt") is False
    assert (tmp_path / "a.ckpt").stat().st_size == 0


def test_an_unwritable_root_is_named(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("notes")
    with pytest.raises(PermissionError, match=r"notes.txt/default is not writable: .*notes.txt is a file, not a"):
        claim_version(str(tmp_path / "notes.txt" / "default"))


# ---- run folders ---------------------------------------------------------------------------------------
def test_a_version_is_claimed_when_chosen_and_given_back_when_a_resume_replaces_it(tmp_path: Path) -> None:
    folder = RunFolder(str(tmp_path), "lightning_logs")
    assert folder.version == 0 and os.path.isdir(folder.path)  # claimed: a run beside it takes version_1
    assert RunFolder(str(tmp_path), "lightning_logs").version == 1
    folder.version = 7  # a resumed run continues version_7: the empty version_0 it claimed goes
    assert sorted(os.listdir(tmp_path / "lightning_logs")) == ["version_1"]
    used = RunFolder(str(tmp_path), "lightning_logs")
    Path(used.path, "metrics.csv").write_text("step\n")
    used.version = 1
    assert os.path.isfile(tmp_path / "lightning_logs" / "version_2" / "metrics.csv")  # a folder with files stays


def test_other_ranks_never_claim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer.loggers import folder as folder_module

    monkeypatch.setenv("RANK", "1")
    if not torch.distributed.is_initialized():
        assert folder_module.global_rank() == 1  # the launcher's environment, before any process group
    monkeypatch.setattr(folder_module, "global_rank", lambda: 1)
    folder = RunFolder(str(tmp_path), "lightning_logs")
    assert folder.version == 0 and not (tmp_path / "lightning_logs").exists()  # a guess until rank zero's arrives
    folder.version = 3  # share_run_folders
    assert folder.path.endswith("version_3") and not (tmp_path / "lightning_logs").exists()


def test_a_given_version_that_holds_files_warns_and_starts_its_metrics_over(tmp_path: Path) -> None:
    first = CSVLogger(save_dir=str(tmp_path), version="fixed", flush_logs_every_n_steps=1)
    first.log_metrics({"loss": 1.0}, step=0)
    first.finalize("success")
    second = CSVLogger(save_dir=str(tmp_path), version="fixed", flush_logs_every_n_steps=1)
    with pytest.warns(UserWarning, match=r"Experiment logs directory .*fixed exists and is not empty\. Previous log"):
        second.log_hyperparams({"lr": 0.5})  # its first write (hparams.yaml, written now as Lightning's)
    second.log_metrics({"loss": 2.0}, step=0)
    second.finalize("success")
    rows = Path(second.log_dir, "metrics.csv").read_text().splitlines()
    assert rows == ["loss,step", "2.0,0"]  # Lightning's rule: the earlier run's rows are gone, not mixed in
    resumed = CSVLogger(save_dir=str(tmp_path), version="fixed", flush_logs_every_n_steps=1)
    resumed.load_state_dict(second.state_dict())  # the same run continued: its own rows stay, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        resumed.log_metrics({"loss": 3.0}, step=1)
    resumed.finalize("success")
    assert Path(resumed.log_dir, "metrics.csv").read_text().splitlines()[1:] == ["2.0,0", "3.0,1"]


def test_wandb_folders_of_ids_made_here_are_claimed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer.loggers import WandbLogger
    from trainer.loggers import wandb as wandb_module

    monkeypatch.delenv("WANDB_RUN_ID", raising=False)
    ids = iter(["aaaaaaaa", "aaaaaaaa", "bbbbbbbb", "cccccccc"])
    monkeypatch.setattr(wandb_module, "_new_run_id", lambda: next(ids))
    first, second = WandbLogger(project="p", save_dir=str(tmp_path)), WandbLogger(project="p", save_dir=str(tmp_path))
    assert first.log_dir.endswith("p/aaaaaaaa") and second.log_dir.endswith("p/bbbbbbbb")  # the clash drew anew
    resumed = WandbLogger(project="p", save_dir=str(tmp_path))
    assert resumed.log_dir.endswith("p/cccccccc")
    resumed.load_state_dict({"id": "aaaaaaaa", "project": "p"})
    assert resumed.log_dir == first.log_dir and sorted(os.listdir(tmp_path / "p")) == ["aaaaaaaa", "bbbbbbbb"]
    given = WandbLogger(project="p", save_dir=str(tmp_path), id="aaaaaaaa")  # an id given: the user's folder
    assert given.log_dir == first.log_dir


# ---- checkpoint names ----------------------------------------------------------------------------------
def test_a_name_taken_between_the_look_and_the_claim_goes_to_the_next_version(tmp_path: Path) -> None:
    names = RunNames(lambda path: False)
    assert names.free(tmp_path, "epoch=0", ".ckpt") == tmp_path / "epoch=0.ckpt"
    claim_file(tmp_path / "epoch=0.ckpt")  # another run got there first
    assert names.claim(tmp_path, "epoch=0", ".ckpt") == tmp_path / "epoch=0-v1.ckpt"
    assert names.claim(tmp_path, "epoch=0", ".ckpt") == tmp_path / "epoch=0-v1.ckpt"  # its own now: replaced
    names.give_back_new()  # the save failed: the empty placeholder goes, the other run's file stays
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch=0.ckpt"]


def test_replacing_another_runs_file_without_the_version_counter_is_said(tmp_path: Path) -> None:
    claim_file(tmp_path / "best.ckpt")
    with pytest.warns(UserWarning, match=r"enable_version_counter=False\) replaces .*best.ckpt, which this run"):
        assert RunNames(lambda path: False).claim(tmp_path, "best", ".ckpt", counter=False) == tmp_path / "best.ckpt"


def fit_into(folder: Path, callback: trainer.ModelCheckpoint, **kwargs: Any) -> trainer.Trainer:
    fit = quiet(folder, max_epochs=1, enable_checkpointing=True, callbacks=[callback])
    fit.fit(Regressor(), loader(regression_data(32)), **kwargs)
    return fit


def test_a_second_run_in_one_dirpath_is_warned_and_keeps_the_first_runs_files(tmp_path: Path) -> None:
    dirpath = tmp_path / "ckpts"
    fit_into(tmp_path, trainer.ModelCheckpoint(dirpath=dirpath))
    before = {p.name: p.read_bytes() for p in dirpath.iterdir()}
    assert sorted(before) == ["epoch=0-step=4.ckpt", "last.ckpt"]
    second = trainer.ModelCheckpoint(dirpath=dirpath)
    with pytest.warns(UserWarning) as caught:
        fit_into(tmp_path, second)
    said = [str(w.message) for w in caught]
    assert f"Checkpoint directory {dirpath} exists and is not empty." in said  # Lightning's words
    assert any("last.ckpt was written by another run" in text and "last-v1.ckpt" in text for text in said)
    assert {p.name: p.read_bytes() for p in dirpath.iterdir() if p.name in before} == before  # untouched
    assert Path(second.last_model_path).name == "last-v1.ckpt"
    assert Path(second.best_model_path).name == "epoch=0-step=4-v1.ckpt"
    resumed = trainer.ModelCheckpoint(dirpath=dirpath)  # the second run continued: it owns last-v1.ckpt
    fit_into(tmp_path, resumed, ckpt_path=second.last_model_path)
    assert resumed.last_model_path == second.last_model_path
    assert sorted(p.name for p in dirpath.iterdir() if p.name.startswith("last")) == ["last-v1.ckpt", "last.ckpt"]


def test_a_failed_save_leaves_no_placeholder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainer.checkpoint import io

    def full_disk(state: Any, path: Any) -> None:
        raise io.CheckpointError(f"could not write checkpoint {path}: No space left on device")

    monkeypatch.setattr(io, "save_checkpoint", full_disk)
    with pytest.raises(io.CheckpointError, match="No space left"):
        fit_into(tmp_path, trainer.ModelCheckpoint(dirpath=tmp_path / "ckpts"))
    assert list((tmp_path / "ckpts").iterdir()) == []


def test_interrupted_checkpoints_of_two_runs_do_not_replace_each_other(tmp_path: Path) -> None:
    class Run:
        is_global_zero = True
        ckpt_path: str | None = None
        strategy = trainer.Trainer(accelerator="cpu", logger=False).strategy

    (tmp_path / "interrupted.ckpt").write_bytes(b"another run's")
    assert claim_for_run(Run(), tmp_path, "interrupted").name == "interrupted-v1.ckpt"  # type: ignore[arg-type]
    resumed = Run()
    resumed.ckpt_path = str(tmp_path / "interrupted.ckpt")  # this run continues that one: its file is its own
    assert claim_for_run(resumed, tmp_path, "interrupted").name == "interrupted.ckpt"  # type: ignore[arg-type]


# ---- ckpt_path="last" ----------------------------------------------------------------------------------
def test_last_names_the_run_it_resumes_when_several_left_checkpoints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for _ in range(2):
        quiet(tmp_path, max_epochs=1, logger=True, enable_checkpointing=True).fit(
            Regressor(), loader(regression_data(32))
        )
    capsys.readouterr()
    fit = quiet(tmp_path, max_epochs=2, logger=True, enable_checkpointing=True)
    fit.fit(Regressor(), loader(regression_data(32)), ckpt_path="last")
    said = capsys.readouterr().out
    assert "ckpt_path='last' resumes" in said and "from the latest of 2 runs" in said
    assert f"{tmp_path}/lightning_logs/version_1/checkpoints/last.ckpt" in said and fit.log_dir.endswith("version_1")
    assert sorted(os.listdir(tmp_path / "lightning_logs")) == ["version_0", "version_1"]  # the claimed version_2 went


def test_last_with_a_given_version_resumes_that_run_only(tmp_path: Path) -> None:
    for version in ("a", "b"):  # b is newer
        quiet(tmp_path, max_epochs=1, enable_checkpointing=True, logger=CSVLogger(str(tmp_path), version=version)).fit(
            Regressor(), loader(regression_data(32))
        )
    fit = quiet(tmp_path, max_epochs=2, enable_checkpointing=True, logger=CSVLogger(str(tmp_path), version="a"))
    fit.fit(Regressor(), loader(regression_data(32)), ckpt_path="last")
    assert fit.ckpt_path == str(tmp_path / "lightning_logs" / "a" / "checkpoints" / "last.ckpt")


def test_last_skips_a_placeholder_whose_save_never_happened(tmp_path: Path) -> None:
    (tmp_path / "ckpts").mkdir()
    (tmp_path / "ckpts" / "last.ckpt").touch()  # claimed, then its run was killed before the first byte
    callback = trainer.ModelCheckpoint(dirpath=tmp_path / "ckpts")
    with pytest.warns(UserWarning) as caught:
        fit_into(tmp_path, callback, ckpt_path="last")
    said = [str(w.message) for w in caught]
    assert any("was written by another run" in m for m in said)
    assert any("found no checkpoint under" in m for m in said)  # a fresh start, not "none is complete"
    assert Path(callback.last_model_path).name == "last-v1.ckpt"  # the name stays the dead run's
    assert torch.load(callback.last_model_path, weights_only=True)["global_step"] == 4
