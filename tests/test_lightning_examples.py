"""What Lightning's own example scripts (``examples/pytorch`` of its repository) need from a port: every name
they import, the demos, validation only where there is a ``validation_step``, the default logger, and epoch
values in Lightning's dtype. The scripts themselves run beside Lightning in benchmarks/lightning_examples.py.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

from tests.helpers import REPO_ROOT
from tests.lightning_port import port
from trainer import DataModule, Module, Trainer

# Every import line of Lightning's examples that names lightning (Lightning 2.6's examples/pytorch: basics,
# bug_report and domain_templates), one per distinct line.
EXAMPLE_IMPORTS = [
    "from lightning.pytorch import LightningDataModule, LightningModule, Trainer, callbacks, cli_lightning_logo",
    "from lightning.pytorch import LightningDataModule, LightningModule, cli_lightning_logo",
    "from lightning.pytorch import LightningModule, Trainer, cli_lightning_logo",
    "from lightning.pytorch import LightningModule, Trainer",
    "from lightning.pytorch import LightningModule",
    "from lightning.pytorch import cli_lightning_logo",
    "from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar",
    "from lightning.pytorch.callbacks.finetuning import BaseFinetuning",
    "from lightning.pytorch.cli import LightningCLI",
    "from lightning.pytorch.core import LightningModule",
    "from lightning.pytorch.demos import Transformer, WikiText2",
    "from lightning.pytorch.demos.mnist_datamodule import MNIST",
    "from lightning.pytorch.demos.mnist_datamodule import MNISTDataModule",
    "from lightning.pytorch.profilers.pytorch import PyTorchProfiler",
    "from lightning.pytorch.strategies import ParallelStrategy",
    "from lightning.pytorch.trainer import Trainer",
    "from lightning.pytorch.utilities import rank_zero_info",
    "from lightning.pytorch.utilities import rank_zero_only",
    "from lightning.pytorch.utilities.imports import _TORCHVISION_AVAILABLE",
    "from lightning.pytorch.utilities.model_helpers import get_torchvision_model",
    "import lightning as L",
]


@pytest.mark.parametrize("line", EXAMPLE_IMPORTS)
def test_every_name_lightnings_examples_import_ports(line: str) -> None:
    ported = port(line)
    assert "lightning" not in ported.replace("Lightning", "").replace("cli_lightning_logo", "")
    exec(ported, {})


def test_ported_module_paths_name_what_lightning_names() -> None:
    namespace: dict[str, Any] = {}
    exec(port("import lightning as L"), namespace)
    exec(port("from lightning.pytorch.strategies import ParallelStrategy"), namespace)
    L = namespace["L"]
    assert L.LightningModule is Module and L.Trainer is Trainer and callable(L.seed_everything)
    from trainer.strategies import DDPStrategy, FSDPStrategy

    assert issubclass(DDPStrategy, namespace["ParallelStrategy"]) and issubclass(FSDPStrategy, DDPStrategy.__base__)
    strategy = DDPStrategy()
    strategy.configure("cpu", [0, 1])
    assert strategy.num_processes == 2  # per machine: what the ImageNet example divides its batch size by


def test_cli_lightning_logo_prints_a_banner_in_lightnings_frame() -> None:
    from trainer import cli_lightning_logo

    with contextlib.redirect_stdout(io.StringIO()) as out:
        cli_lightning_logo()
    assert out.getvalue().startswith("\n\033[0;35m\n") and out.getvalue().endswith("\033[0m\n\n")


def test_demos_and_the_new_names_load_only_when_used() -> None:
    new = (
        "trainer.demos",
        "trainer.logo",
        "trainer.utilities.imports",
        "trainer.utilities.model_helpers",
        "torchvision",
    )
    code = f"import sys, trainer; print(sorted(m for m in sys.modules if m.startswith({new!r})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    assert done.stdout.strip() == "[]"


def test_get_torchvision_model_names_what_is_missing_without_torchvision() -> None:
    from trainer.utilities import _TORCHVISION_AVAILABLE, get_torchvision_model

    if _TORCHVISION_AVAILABLE:
        assert get_torchvision_model("resnet18", weights=None).fc.out_features == 1000
    else:
        with pytest.raises(ModuleNotFoundError, match="get_torchvision_model\\('resnet18'\\) needs torchvision"):
            get_torchvision_model("resnet18")


# ---- validation only where there is a validation_step -------------------------------------------------------
class NoValidation(Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class WithValidation(NoValidation):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val", self.net(batch[0]).mean())


class Shared(DataModule):
    def __init__(self) -> None:
        super().__init__()
        self.val_requests = 0

    def train_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4)

    def val_dataloader(self) -> DataLoader:
        self.val_requests += 1
        return DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)


def fit(module: Module, *args: Any, **kwargs: Any) -> tuple[Trainer, list[str]]:
    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, *args, **kwargs)
    return trainer, [str(w.message) for w in caught if "Skipping val loop" in str(w.message)]


def test_a_shared_datamodule_is_not_asked_for_validation_by_a_model_without_validation_step() -> None:
    data = Shared()
    trainer, warned = fit(NoValidation(), datamodule=data)
    assert trainer.global_step == 4 and data.val_requests == 0  # no sanity check, no validation
    assert warned == ["You passed in a `val_dataloader` but have no `validation_step`. Skipping val loop."]
    trainer, warned = fit(WithValidation(), datamodule=data)
    assert data.val_requests == 1 and "val" in trainer.callback_metrics and warned == []


def test_given_val_loaders_are_neither_checked_nor_run_without_a_validation_step() -> None:
    class NotALoader(Dataset):  # refused as a validation loader ("a Dataset, which yields samples") if checked
        def __len__(self) -> int:
            return 1

        def __getitem__(self, i: int) -> torch.Tensor:
            raise AssertionError("read")

    train = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4)
    trainer, warned = fit(NoValidation(), train, NotALoader())
    assert trainer.global_step == 4 and len(warned) == 1


def test_a_validation_step_without_loaders_warns_as_lightning() -> None:
    from trainer.utilities import PossibleUserWarning

    train = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4)
    with pytest.warns(PossibleUserWarning, match=r"validation_step` but have no `val_dataloader`\. Skipping"):
        Trainer(max_epochs=1, logger=False, enable_checkpointing=False).fit(WithValidation(), train)


# ---- epoch values in Lightning's dtype -------------------------------------------------------------------
class Logs(NoValidation):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        self.log("loss", loss, on_step=False, on_epoch=True)  # float32, mean weighted by batch size
        self.log("loss64", loss.double(), on_step=False, on_epoch=True)
        self.log("half", loss.bfloat16(), on_step=False, on_epoch=True, reduce_fx="max")
        self.log("count", batch_idx, on_step=False, on_epoch=True, reduce_fx="sum")
        return loss


def test_epoch_values_are_lightnings_sums_in_lightnings_dtype() -> None:
    torch.manual_seed(0)
    x = torch.randn(10, 4)
    module = Logs()
    start = [p.detach().clone() for p in module.parameters()]
    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(module, DataLoader(TensorDataset(x), batch_size=4))  # batches of 4, 4, 2
    metrics = trainer.callback_metrics
    assert {k: v.dtype for k, v in metrics.items()} == {
        "loss": torch.float32,
        "loss64": torch.float64,
        "half": torch.float32,
        "count": torch.float32,
    }
    # Lightning's _ResultMetric: value = 0.0 (float32) + loss * batch_size, ..., then / the int64 count
    net = torch.nn.Linear(4, 1)
    with torch.no_grad():
        for p, s in zip(net.parameters(), start):
            p.copy_(s)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    total, count, losses = torch.tensor(0.0), torch.tensor(0), []
    for i in range(0, 10, 4):
        batch = x[i : i + 4]
        loss = net(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss = loss.detach()
        total, count = total + loss * len(batch), count + len(batch)  # Lightning's _ResultMetric.update
        losses.append(loss)
    assert torch.equal(metrics["loss"], total / count)  # bit for bit
    assert metrics["half"] == max(loss.bfloat16().float() for loss in losses) and metrics["count"] == 3.0


def test_validate_results_hold_float32_values_as_lightning() -> None:
    class Evaluated(WithValidation):
        pass

    trainer = Trainer(logger=False, enable_progress_bar=False)
    (result,) = trainer.validate(
        Evaluated(), DataLoader(TensorDataset(torch.randn(10, 4)), batch_size=3), verbose=False
    )
    assert trainer.callback_metrics["val"].dtype == torch.float32 and isinstance(result["val"], float)


# ---- the demos draw Lightning's numbers ------------------------------------------------------------------
def _built(cls: Any, *args: Any, **kwargs: Any) -> Any:
    torch.manual_seed(0)
    return cls(*args, **kwargs)


def _same_weights(ours: torch.nn.Module, theirs: torch.nn.Module) -> bool:
    a, b = ours.state_dict(), theirs.state_dict()
    return list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_the_demos_are_lightnings_weight_for_weight_and_sample_for_sample(tmp_path: Any) -> None:
    demos = pytest.importorskip("lightning.pytorch.demos")
    from lightning.pytorch.demos import mnist_datamodule
    from lightning.pytorch.demos.boring_classes import RandomDataset as TheirRandomDataset

    import trainer.demos as ours

    assert set(demos.__all__) <= set(ours.__all__)
    for name in ("BoringModel", "DemoModel", "SimpleLSTM"):
        assert _same_weights(_built(getattr(ours, name)), _built(getattr(demos, name)))
    assert torch.equal(_built(ours.RandomDataset, 32, 64).data, _built(TheirRandomDataset, 32, 64).data)
    text = tmp_path / "wikitext-2.txt"
    text.write_text("the cat sat\non the mat\n\nthe end\n")
    mine, theirs = ours.WikiText2(tmp_path, block_size=3), demos.WikiText2(tmp_path, block_size=3)
    assert torch.equal(mine.data, theirs.data) and mine.dictionary.idx2word == theirs.dictionary.idx2word
    ours_tf, theirs_tf = _built(ours.Transformer, vocab_size=9), _built(demos.Transformer, vocab_size=9)
    assert _same_weights(ours_tf, theirs_tf)
    inputs, target = mine[0]
    ours_tf.eval(), theirs_tf.eval()
    assert torch.equal(ours_tf(inputs[None], target[None]), theirs_tf(inputs[None], target[None]))

    folder = tmp_path / "MNIST" / "complete"
    folder.mkdir(parents=True)
    for name in ("training.pt", "test.pt"):
        torch.save((torch.randint(0, 256, (40, 28, 28), dtype=torch.uint8), torch.arange(40) % 10), folder / name)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PL_USE_MOCKED_MNIST", "1")
        mp.setattr(mnist_datamodule, "_TORCHVISION_AVAILABLE", False)  # the hosted copy's transform-free samples
        mp.setattr("trainer.utilities.imports._TORCHVISION_AVAILABLE", False)
        data = [m.MNISTDataModule(str(tmp_path), val_split=8, num_workers=0) for m in (ours, mnist_datamodule)]
        for module in data:
            module.setup("fit")
        mine_samples, their_samples = ([m.dataset_train[i][0] for i in (0, 5)] for m in data)
        assert all(torch.equal(a, b) for a, b in zip(mine_samples, their_samples))
        assert len(data[0].train_dataloader()) == len(data[1].train_dataloader()) == 1  # 32 samples, drop_last


def test_evaluation_never_loads_a_batch_past_limit_val_batches() -> None:
    class Counted(TensorDataset):
        reads = 0

        def __getitem__(self, index: int) -> tuple[torch.Tensor, ...]:
            Counted.reads += 1
            return super().__getitem__(index)

    loader = DataLoader(Counted(torch.randn(40, 4)), batch_size=4)
    trainer = Trainer(limit_val_batches=3, logger=False, enable_progress_bar=False)
    trainer.validate(WithValidation(), loader, verbose=False)
    assert Counted.reads == 3 * 4  # a 4th batch would be read and thrown away
