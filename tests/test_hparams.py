"""``save_hyperparameters``, ``hparams`` / ``hparams_initial`` and ``load_from_checkpoint``, as in Lightning."""

from __future__ import annotations

import warnings
from argparse import Namespace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import trainer
from tests.models import Regressor, loader, quiet, regression_data
from trainer.checkpoint.io import CheckpointError
from trainer.hparams import AttributeDict, plain_values
from trainer.loggers.base import Logger


class Base(trainer.Module):
    """Saves every ``__init__`` argument on the stack, its subclasses' too."""

    def __init__(self, features: int = 8, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.seen_inside = self.hparams.lr  # usable right after the call, inside __init__
        self.net = torch.nn.Linear(self.hparams.features, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class Child(Base):
    def __init__(self, depth: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)


def checkpoint_of(module: trainer.Module, tmp_path: Path, **kwargs: Any) -> Path:
    fit = quiet(tmp_path, max_steps=1, **kwargs)
    fit.fit(module, loader(regression_data(8, features=module.hparams.get("features", 8))))
    path = tmp_path / "model.ckpt"
    fit.save_checkpoint(path)
    return path


# ---- what save_hyperparameters saves -------------------------------------------------------------------------
def test_no_args_saves_every_init_argument_a_parent_class_included() -> None:
    module = Child(3, lr=0.1)
    assert module.hparams == {"features": 8, "lr": 0.1, "depth": 3}
    assert isinstance(module.hparams, AttributeDict)
    assert module.hparams.depth == 3 and module.seen_inside == 0.1


def test_ignore_a_name_or_a_list() -> None:
    class Ignoring(Base):
        def __init__(self, depth: int = 2, scale: float = 1.0, skip: Any = "depth") -> None:
            super().__init__()
            self.save_hyperparameters(ignore=skip)

    assert set(Ignoring().hparams) == {"features", "lr", "scale", "skip"}
    assert set(Ignoring(skip=["depth", "scale", "lr"]).hparams) == {"features", "skip"}  # a base class's name too


def test_names_given_explicitly() -> None:
    class Named(trainer.Module):
        def __init__(self, a: int = 1, b: str = "x", c: float = 2.0) -> None:
            super().__init__()
            self.save_hyperparameters("a", "c")

    assert Named(5).hparams == {"a": 5, "c": 2.0}

    class Typo(trainer.Module):
        def __init__(self, a: int = 1) -> None:
            super().__init__()
            self.save_hyperparameters("b")

    with pytest.raises(ValueError, match=r"\['b'\] are not __init__ arguments of Typo \(it has \['a'\]\)"):
        Typo()


@pytest.mark.parametrize("config", [{"lr": 0.1, "features": 4}, Namespace(lr=0.1, features=4)])
def test_a_dict_or_namespace_is_saved_and_passed_back_whole(config: Any, tmp_path: Path) -> None:
    class Configured(Base):
        def __init__(self, config: Any) -> None:
            trainer.Module.__init__(self)
            self.save_hyperparameters(config)
            self.config = config
            self.net = torch.nn.Linear(self.hparams.features, 1)

    module = Configured(config)
    assert module.hparams == {"lr": 0.1, "features": 4}
    loaded = Configured.load_from_checkpoint(checkpoint_of(module, tmp_path))
    assert type(loaded.config) is type(config) and loaded.hparams == module.hparams


def test_empty_config_is_a_no_op_and_primitives_are_refused() -> None:
    class Empty(trainer.Module):
        def __init__(self, given: Any) -> None:
            super().__init__()
            self.save_hyperparameters(given)

    assert Empty({}).hparams == {}
    with pytest.raises(
        ValueError,
        match=r"Primitives .* are not allowed: .*takes argument names, a dict or an argparse\.Namespace, not int",
    ):
        Empty(3)


def test_hparams_are_settable_and_hparams_initial_is_frozen() -> None:
    class Listed(trainer.Module):
        def __init__(self, sizes: list[int] | None = None) -> None:
            super().__init__()
            self.save_hyperparameters()

    module = Listed([1, 2])
    module.hparams.lr = 0.5
    module.hparams.sizes.append(3)
    assert module.hparams == {"sizes": [1, 2, 3], "lr": 0.5}
    assert module.hparams_initial == {"sizes": [1, 2]}
    module.hparams_initial["sizes"].append(9)  # a copy each time: the saved one does not change
    assert module.hparams_initial == {"sizes": [1, 2]}


def test_modules_without_save_hyperparameters_still_record_their_arguments(tmp_path: Path) -> None:
    module = Regressor(features=4, lr=0.01)
    assert module.hparams == {"features": 4, "lr": 0.01, "dropout": 0.0, "adam": False}
    assert module.hparams_initial == module.hparams
    loaded = Regressor.load_from_checkpoint(checkpoint_of(module, tmp_path))
    assert loaded.hparams == module.hparams and loaded.net[0].in_features == 4


# ---- checkpoints -----------------------------------------------------------------------------------------------
def test_load_from_checkpoint_restores_hparams_and_overrides_win(tmp_path: Path) -> None:
    module = Child(3, lr=0.1, features=4)
    path = checkpoint_of(module, tmp_path)
    loaded = Child.load_from_checkpoint(path)
    assert loaded.hparams == module.hparams
    assert torch.equal(loaded.net.weight, module.net.weight)
    assert Child.load_from_checkpoint(path, lr=0.5).hparams == {**module.hparams, "lr": 0.5}


def test_values_set_after_init_are_saved_and_dropped_on_load_as_lightning_does(tmp_path: Path) -> None:
    module = Base(features=4)
    module.hparams.steps_per_epoch = 7  # not an __init__ argument
    path = checkpoint_of(module, tmp_path)
    assert torch.load(path, weights_only=True)["hyper_parameters"]["steps_per_epoch"] == 7
    assert Base.load_from_checkpoint(path).hparams == {"features": 4, "lr": 0.05}


def test_modules_are_left_out_with_a_warning_and_passed_again(tmp_path: Path) -> None:
    class WithBackbone(Base):
        def __init__(self, backbone: torch.nn.Linear, width: int = 8) -> None:
            super().__init__()
            self.backbone: torch.nn.Linear = backbone

    with pytest.warns(UserWarning, match=r"'backbone' is an instance of `nn.Module`.*ignore=\['backbone'\]"):
        module = WithBackbone(torch.nn.Linear(2, 2))
    with pytest.warns(UserWarning, match=r"WithBackbone.load_from_checkpoint\(path, backbone=\.\.\.\)"):
        path = checkpoint_of(module, tmp_path)
    with pytest.raises(TypeError, match=r"written by .*WithBackbone.*missing 1 required positional argument"):
        WithBackbone.load_from_checkpoint(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = WithBackbone.load_from_checkpoint(path, backbone=torch.nn.Linear(2, 2))
    assert set(loaded.hparams) == {"backbone", "width", "features", "lr"}
    assert torch.equal(loaded.backbone.weight, module.backbone.weight)


def test_ignored_modules_give_no_warning_and_load_with_the_module_passed(tmp_path: Path) -> None:
    class Ignored(Base):
        def __init__(self, backbone: torch.nn.Module, features: int = 8, lr: float = 0.05) -> None:
            trainer.Module.__init__(self)  # Base's save_hyperparameters() would warn before the ignore
            self.save_hyperparameters(ignore="backbone")
            self.backbone = backbone
            self.net = torch.nn.Linear(features, 1)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        path = checkpoint_of(Ignored(torch.nn.Linear(2, 2)), tmp_path)
    assert Ignored.load_from_checkpoint(path, backbone=torch.nn.Linear(2, 2)).hparams == {"features": 8, "lr": 0.05}


def test_plain_values_convert_subclasses_and_drop_objects() -> None:
    kept, dropped = plain_values(
        {"f": np.float64(0.5), "d": AttributeDict(a=1), "t": torch.ones(1), "ok": [1, ("a", None)], "bad": [object()]}
    )
    assert kept == {"f": 0.5, "d": {"a": 1}, "ok": [1, ("a", None)]}
    assert type(kept["f"]) is float and type(kept["d"]) is dict
    assert dropped == ["bad", "t"]


def test_another_class_checkpoint_names_its_writer(tmp_path: Path) -> None:
    path = checkpoint_of(Child(2, features=4), tmp_path)
    with pytest.raises(
        CheckpointError, match=r"written by .*Child with hyper-parameters \['depth', 'features', 'lr'\]"
    ):
        Regressor.load_from_checkpoint(path)


# ---- loggers ---------------------------------------------------------------------------------------------------
class Memory(Logger):
    def __init__(self) -> None:
        self.params: list[dict[str, Any]] = []

    def log_hyperparams(self, params: dict[str, Any]) -> None:
        self.params.append(dict(params))

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        pass


@pytest.mark.parametrize("log", [True, False])
def test_loggers_get_the_initial_hparams_at_fit_start_unless_logger_false(log: bool, tmp_path: Path) -> None:
    class Quiet(Base):
        def __init__(self, features: int = 8) -> None:
            trainer.Module.__init__(self)
            self.save_hyperparameters(logger=log)
            self.net = torch.nn.Linear(features, 1)
            self.hparams.lr = 0.05  # after the save: not in hparams_initial

    mem = Memory()
    quiet(tmp_path, max_steps=1, logger=mem).fit(Quiet(), loader(regression_data(8)))
    assert mem.params == ([{"features": 8}] if log else [])  # as Lightning: logger=False logs nothing


# ---- Lightning's HyperparametersMixin and its rules at fit -----------------------------------------------------
def test_your_own_class_gets_save_hyperparameters_from_the_mixin() -> None:
    from trainer.hparams import HyperparametersMixin

    class Settings(HyperparametersMixin):
        def __init__(self, width: int, depth: int = 2) -> None:
            super().__init__()
            self.save_hyperparameters()

    settings = Settings(16)
    assert settings.hparams == {"width": 16, "depth": 2} and settings.hparams_initial == {"width": 16, "depth": 2}
    assert isinstance(Base(), HyperparametersMixin) and issubclass(trainer.DataModule, HyperparametersMixin)


def test_hparams_pickle_cannot_write_are_removed_at_fit_with_a_warning(tmp_path: Path) -> None:
    class WithLambda(Base):
        def __init__(self, act: Any = lambda x: x) -> None:
            super().__init__()
            self.save_hyperparameters()

    module = WithLambda()
    with pytest.warns(UserWarning, match=r"Attribute 'act' removed from hparams because it cannot be pickled"):
        quiet(tmp_path, max_steps=1).fit(module, loader(regression_data(8)))
    assert "act" not in module.hparams


def test_module_and_datamodule_saving_one_name_with_two_values_is_refused(tmp_path: Path) -> None:
    class Data(trainer.DataModule):
        def __init__(self, lr: float = 0.5) -> None:
            super().__init__()
            self.save_hyperparameters()

        def train_dataloader(self) -> Any:
            return loader(regression_data(8))

    with pytest.raises(RuntimeError, match=r"Error while merging hparams: the keys \['lr'\] are present in both"):
        quiet(tmp_path, max_steps=1, logger=Memory()).fit(Base(lr=0.1), datamodule=Data())


def test_a_subclass_drops_what_its_base_saved() -> None:
    class Base(trainer.Module):
        def __init__(self, width: int = 4, seed: int = 0) -> None:
            super().__init__()
            self.save_hyperparameters()

    class Sub(Base):
        def __init__(self) -> None:
            super().__init__(width=8)
            self.remove_ignored_hparams(["seed"])

    assert dict(Sub().hparams) == {"width": 8}


def test_a_module_that_sets_its_own_hparams_attribute_still_records_its_arguments(tmp_path: Path) -> None:
    class OwnsHparams(Regressor):  # Lightning's private name, set by hand as some Lightning modules do
        def __init__(self, width: int = 3) -> None:
            super().__init__()
            self._hparams = {"width": width}

    module = OwnsHparams(width=5)
    fit = quiet(tmp_path, max_epochs=1, enable_checkpointing=True)
    fit.fit(module, loader(regression_data(16), batch_size=8))
    assert module._hparams == {"width": 5} and module.hparams == {"width": 5}
    saved = torch.load(fit.checkpoint_callback.best_model_path, weights_only=True)
    assert saved["hyper_parameters"] == {"width": 5}
