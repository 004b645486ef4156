"""Each tests/lightning_style script reports what it reports under Lightning (tests/lightning_parity.py).

The slow tests run each script under Lightning and under steadytrain (fp32, CPU, ``num_workers=0``) on one
device, and on two DDP ranks with shuffling off, and compare every value it reports within 1e-6
(relative); skipped where ``lightning`` is not installed (``pip install -e .[compat]``). The default
suite checks the comparison itself.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.lightning_parity import differences, normalized, parity, same_printed
from tests.test_lightning_style import script_names

# Scripts that still differ, and why; xfail(strict=False), so one that starts matching shows as XPASS.
DIFFERS_ON_ONE_DEVICE: dict[str, str] = {
    "fast_dev_run": "ModelCheckpoint's unused folder is <default_root_dir>/checkpoints: runs/ here, the working"
    " directory in Lightning (documented default)",
    "mlflow_logger": "MLFlowLogger keeps its checkpoints under save_dir='runs', not ./mlruns (documented)",
    "tuner": "scale_batch_size puts the random stream back (documented); Lightning's leaves it moved, so its lr_find"
    " then shuffles otherwise",
}
DIFFERS_ON_TWO_RANKS: dict[str, str] = {
    **DIFFERS_ON_ONE_DEVICE,
    "autoencoder": "Lightning pads the 205 validation samples to 206 under DDP; steadytrain evaluates each once"
    " (documented)",
    "finetuning": "Lightning's DDP does not average layers unfrozen after it wrapped the model; steadytrain wraps again"
    " (documented)",
    "gan": "Lightning's DDP refuses it (parameters unused by a loss need strategy='ddp_find_unused_parameters_true')",
    "shared_datamodule": "its GAN, as gan's: Lightning's DDP refuses parameters unused by a loss",
    "random_transforms_limit": "each rank trains on Lightning's batches (same labels, same order), but on several"
    " ranks each sample's augmentation draws from its own seed (seed, epoch, index: trainer/data/sample_seeds.py,"
    " documented), where Lightning's draw from each rank's stream; one device matches",
    "profiler_simple": "matches, but Lightning's second fit once reported other values under a loaded machine (1 run"
    " of 6; its side varied, ours did not); the cause is not found yet",
}
DIFFERS_ON_TWO_RANKS.pop("tuner")  # with shuffling off, lr_find stops after 2 points on both sides, alike


def params(differs: dict[str, str]) -> list[Any]:
    return [
        pytest.param(name, marks=[pytest.mark.xfail(strict=False, reason=differs[name])] if name in differs else [])
        for name in script_names()
    ]


@pytest.mark.slow
@pytest.mark.parametrize("name", params(DIFFERS_ON_ONE_DEVICE))
def test_script_reports_lightnings_values_on_one_device(name: str) -> None:
    pytest.importorskip("lightning")
    found = parity(name, world=1, shuffle="on")
    assert not found, "\n".join(found)


@pytest.mark.slow
@pytest.mark.parametrize("name", params(DIFFERS_ON_TWO_RANKS))
def test_script_reports_lightnings_values_on_two_ranks_without_shuffling(name: str) -> None:
    pytest.importorskip("lightning")
    found = parity(name, world=2, shuffle="off")
    assert not found, "\n".join(found)


def test_the_reasons_name_existing_scripts() -> None:
    assert set(DIFFERS_ON_ONE_DEVICE) | set(DIFFERS_ON_TWO_RANKS) <= set(script_names())


# ---- the comparison ---------------------------------------------------------------------------------------
def test_numbers_agree_within_1e_6_relative_and_every_key_counts() -> None:
    assert differences({"a": [1.0, 2.0]}, {"a": [1.0 + 1e-7, 2.0]}) == []
    assert differences({"a": 1.0}, {"a": 1.0 + 1e-5}) == ["/a: 1.0 != 1.00001"]
    assert differences({"a": 1, "b": 2}, {"a": 1}) == ["/b: only in ours"]
    assert differences({"t": "int"}, {"t": "float"}) == ["/t: 'int' != 'float'"]
    assert differences([1, 2], [1, 2, 3]) == [": [1, 2] != [1, 2, 3]"]


def test_machine_readings_count_where_they_were_logged_not_their_value() -> None:
    def report(rows: list[list[Any]]) -> dict[str, Any]:
        table = {"header": ["DeviceStatsMonitor.on_train_batch_end/cpu_percent", "train_loss"], "rows": rows}
        return normalized({"calls": [], "files": {"metrics.csv": table}})

    assert differences(report([[50.0, None], [None, 1.0]]), report([[0.0, None], [None, 1.0]])) == []
    assert differences(report([[50.0, None], [None, 1.0]]), report([[None, 1.0], [0.0, None]])) != []
    assert differences(report([[None, 2.0]]), report([[None, 1.0]])) != []


def test_printed_numbers_agree_within_their_last_digit() -> None:
    assert same_printed("loss=0.1235 step=4", "loss=0.1234 step=4")  # :.4f rounds two close values apart
    assert not same_printed("loss=0.1237 step=4", "loss=0.1234 step=4")
    assert not same_printed("step=5", "step=4") and not same_printed("loss=1", "val=1")
    assert differences({"printed": ["x=0.50"]}, {"printed": ["x=0.52"]}) == ["/printed[0]: 'x=0.50' != 'x=0.52'"]


def test_each_sides_run_folder_is_compared_as_log_dir() -> None:
    ours = {"calls": [{"trainer": {"log_dir": {"value": "runs/default/version_0"}}}], "files": {}}
    ours["files"]["runs/default/version_0/metrics.csv"] = None
    theirs = {"calls": [{"trainer": {"log_dir": {"value": "lightning_logs/version_0"}}}], "files": {}}
    theirs["files"]["lightning_logs/version_0/metrics.csv"] = None
    assert differences(normalized(ours), normalized(theirs)) == []
