"""Lightning's ``CombinedLoader``: its four modes, several training loaders in fit, and evaluation loaders shown as
given (trainer/test_dataloaders.py::test_fit_multiple_train_loaders and the utilities' combined-loader tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tests.models import Regressor, loader, quiet, regression_data
from trainer.exceptions import MisconfigurationException
from trainer.utilities import CombinedLoader


def loaders() -> dict[str, DataLoader]:
    return {"a": DataLoader(range(6), batch_size=4), "b": DataLoader(range(15), batch_size=5)}


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("min_size", [([0, 1, 2, 3], [0, 1, 2, 3, 4]), ([4, 5], [5, 6, 7, 8, 9])]),
        (
            "max_size_cycle",
            [([0, 1, 2, 3], [0, 1, 2, 3, 4]), ([4, 5], [5, 6, 7, 8, 9]), ([0, 1, 2, 3], [10, 11, 12, 13, 14])],
        ),
        ("max_size", [([0, 1, 2, 3], [0, 1, 2, 3, 4]), ([4, 5], [5, 6, 7, 8, 9]), (None, [10, 11, 12, 13, 14])]),
    ],
)
def test_modes_combine_the_loaders_batch_by_batch(mode: str, expected: list[Any]) -> None:
    combined = CombinedLoader(loaders(), mode)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="call `iter\\(combined_loader\\)` first"):
        len(combined)
    got = [
        ((None if b["a"] is None else b["a"].tolist()), b["b"].tolist(), batch_idx, idx)
        for b, batch_idx, idx in iter(combined)
    ]
    assert got == [(a, b, i, 0) for i, (a, b) in enumerate(expected)]
    assert len(combined) == len(expected)


def test_sequential_mode_runs_each_loader_whole_with_its_index() -> None:
    combined = iter(CombinedLoader(loaders(), "sequential"))
    assert [(b.tolist()[0], i, idx) for b, i, idx in combined] == [
        (0, 0, 0),
        (4, 1, 0),
        (0, 0, 1),
        (5, 1, 1),
        (10, 2, 1),
    ]
    assert len(combined) == 5


class Started:
    """An iterable that records when a pass over it starts (a DataLoader starts its workers there)."""

    def __init__(self, n: int) -> None:
        self.n, self.starts = n, 0

    def __iter__(self) -> Any:
        self.starts += 1
        return iter(range(self.n))


@pytest.mark.parametrize(("mode", "started"), [("min_size", [1, 1]), ("max_size", [1, 1]), ("sequential", [1, 0])])
def test_iter_starts_every_loader_at_once_and_sequential_only_the_first(mode: str, started: list[int]) -> None:
    parts = [Started(2), Started(3)]
    combined = iter(CombinedLoader(parts, mode))  # type: ignore[arg-type]
    assert [part.starts for part in parts] == started  # before any batch: workers of all loaders come up together
    while next(combined, None) is not None:  # not list(): iter() again would start a new pass
        pass
    assert [part.starts for part in parts] == [1, 1]


def test_nested_collections_keep_their_shape() -> None:
    combined = CombinedLoader({"pair": [DataLoader(range(2)), DataLoader(range(2))], "one": (DataLoader(range(2)),)})
    first, _, _ = next(iter(combined))
    assert isinstance(first["pair"], list) and isinstance(first["one"], tuple) and len(combined.flattened) == 3
    with pytest.raises(MisconfigurationException, match="Unsupported mode 'zip'"):
        CombinedLoader(loaders(), "zip")  # type: ignore[arg-type]


class TwoLoaders(Regressor):
    """Trains on a dict of two loaders: each batch is a dict of their batches."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[tuple[str, ...]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.keys.append(tuple(batch))
        return super().training_step(batch["long"], batch_idx) + 0 * super().training_step(batch["short"], batch_idx)


def test_fit_on_a_dict_of_loaders_cycles_the_shorter_one(tmp_path: Path) -> None:
    model = TwoLoaders()
    fit = quiet(tmp_path, max_epochs=1)
    fit.fit(model, {"long": loader(regression_data(32)), "short": loader(regression_data(16))})
    assert fit.num_training_batches == 4 and fit.global_step == 4  # max_size_cycle: the longer loader's length
    assert model.keys == [("long", "short")] * 4
    assert set(fit.train_dataloader) == {"long", "short"}  # as given, as Lightning shows it
    with pytest.raises(MisconfigurationException, match='`FitLoop` does not support the `CombinedLoader\\(mode="seq'):
        quiet(tmp_path).fit(TwoLoaders(), CombinedLoader({"long": loader(regression_data(32))}, "sequential"))


class SeveralValidated(Regressor):
    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        super().validation_step(batch, batch_idx)


def test_evaluation_loaders_are_shown_as_given(tmp_path: Path) -> None:
    fit = quiet(tmp_path, max_epochs=1)
    one = loader(regression_data(16))
    fit.validate(Regressor(), one, verbose=False)
    assert fit.val_dataloaders is one  # one loader, not a list of one (Lightning's trainer.val_dataloaders)
    results = fit.validate(SeveralValidated(), {"x": one, "y": loader(regression_data(8))}, verbose=False)
    assert set(fit.val_dataloaders) == {"x", "y"} and len(results) == 2
    sequential = CombinedLoader([one, loader(regression_data(8))], "sequential")
    assert len(fit.validate(SeveralValidated(), sequential, verbose=False)) == 2  # each loader with its dataloader_idx


class CountsBatches(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[list[int]] = []

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.seen.append([len(part[0]) for part in batch.values() if part is not None])

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.validation_step(batch, batch_idx)


@pytest.mark.parametrize(("mode", "runs"), [("min_size", 2), ("max_size_cycle", 3), ("max_size", 3)])
def test_evaluating_a_combined_loader_counts_each_inner_loader(tmp_path: Path, mode: str, runs: int) -> None:
    """``num_val_batches`` lists each inner loader's batches, as Lightning reports them; the mode decides the pass."""
    combined = {"a": loader(regression_data(24)), "b": loader(regression_data(16))}  # 3 and 2 batches
    fit = quiet(tmp_path)
    model = CountsBatches()
    fit.validate(model, CombinedLoader(combined, mode), verbose=False)  # type: ignore[arg-type]
    assert fit.num_val_batches == [3, 2] and len(model.seen) == runs
    fit.test(model, CombinedLoader(combined, mode), verbose=False)  # type: ignore[arg-type]
    assert fit.num_test_batches == [3, 2] and len(model.seen) == 2 * runs
    limited = quiet(tmp_path, limit_val_batches=0.5)  # the limit applies to each inner loader: 1 and 1
    limited.validate(CountsBatches(), CombinedLoader(combined, mode), verbose=False)  # type: ignore[arg-type]
    assert limited.num_val_batches == [1, 1]
