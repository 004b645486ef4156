"""Lightning's public behaviour that its own trainer/, loops/ and models/ tests showed steadytrain missing: the
messages, warnings and values a ported script sees."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch

import trainer
from tests.lightning_port import ported_module
from trainer.demos import BoringModel
from trainer.plugins import LayerSync


def small(tmp_path: Path, **kwargs: Any) -> trainer.Trainer:
    flags: dict[str, Any] = {
        "default_root_dir": tmp_path,
        "accelerator": "cpu",
        "devices": 1,
        "max_epochs": 1,
        "limit_train_batches": 2,
        "limit_val_batches": 2,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "logger": False,
    }
    return trainer.Trainer(**{**flags, **kwargs})


def test_an_unknown_precision_is_named_in_lightnings_words() -> None:
    with pytest.raises(ValueError, match=r"Precision 'fp8' is invalid: precision= takes one of 32-true"):
        trainer.Trainer(accelerator="cpu", precision="fp8")


def test_sync_batchnorm_with_another_layer_sync_names_its_class() -> None:
    with pytest.raises(ValueError, match=r"provided a `LayerSync` plugin, but this is not allowed"):
        trainer.Trainer(accelerator="cpu", sync_batchnorm=True, plugins=[mock.Mock(spec=LayerSync)])


def test_fabrics_cluster_environments_port_to_ours() -> None:
    assert ported_module("lightning.fabric.plugins.environments") == "trainer.plugins.environments"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """``tmp_path`` over http, as a URL prefix."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join()


def test_load_from_checkpoint_downloads_a_url(tmp_path: Path, served: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "hub"))  # where torch hub keeps the download
    model = BoringModel()
    run = small(tmp_path)
    run.fit(model)
    run.save_checkpoint(tmp_path / "model.ckpt")
    loaded = BoringModel.load_from_checkpoint(f"{served}/model.ckpt")
    assert torch.equal(loaded.layer.weight, model.layer.weight)


def test_ckpt_path_last_with_nothing_to_resume_warns(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match="No checkpoint will be loaded"):
        small(tmp_path).fit(BoringModel(), ckpt_path="last")


def test_predict_step_returning_none_warns(tmp_path: Path) -> None:
    class Forgetful(BoringModel):
        def predict_step(self, batch: Any, batch_idx: int) -> None:
            self(batch)  # the `return` forgotten

    with pytest.warns(UserWarning, match="predict returned None"):
        small(tmp_path, limit_predict_batches=2).predict(Forgetful())


class Counter(trainer.Callback):
    def state_dict(self) -> dict[str, Any]:
        return {"count": 1}


def test_resuming_without_a_callback_that_saved_state_warns_naming_it(tmp_path: Path) -> None:
    first = small(tmp_path, callbacks=[Counter()])
    first.fit(BoringModel())
    path = tmp_path / "run.ckpt"
    first.save_checkpoint(path)
    with pytest.warns(UserWarning, match=r"Please add the following callbacks: \['Counter'\]"):
        small(tmp_path, max_epochs=2).fit(BoringModel(), ckpt_path=path)


def test_progress_bar_counts_no_validation_in_an_epoch_that_does_not_validate(tmp_path: Path) -> None:
    seen: list[int | float] = []

    class Record(trainer.Callback):
        def on_train_epoch_end(self, run: trainer.Trainer, module: Any) -> None:
            assert run.progress_bar_callback is not None
            seen.append(run.progress_bar_callback.total_val_batches)

    small(
        tmp_path,
        max_epochs=4,
        check_val_every_n_epoch=2,
        num_sanity_val_steps=0,
        enable_progress_bar=True,
        callbacks=[Record()],
    ).fit(BoringModel())
    assert seen == [0, 2, 0, 2]


def test_num_val_batches_after_validate_are_validates_own(tmp_path: Path) -> None:
    run = small(tmp_path, limit_val_batches=3)
    run.validate(BoringModel())
    assert run.num_val_batches == [3]


def test_a_callback_logs_with_self_log(tmp_path: Path) -> None:
    class Logs(trainer.Callback):
        def on_train_epoch_end(self, run: trainer.Trainer, module: Any) -> None:
            self.log("from_callback", 5.0)

    run = small(tmp_path, callbacks=[Logs()])
    run.fit(BoringModel())
    assert run.callback_metrics["from_callback"] == 5.0


def test_load_from_checkpoint_with_empty_weights_and_strict_false_warns(tmp_path: Path) -> None:
    run = small(tmp_path)
    run.fit(BoringModel())
    path = tmp_path / "empty.ckpt"
    run.save_checkpoint(path)
    saved = torch.load(path, weights_only=True)
    torch.save({**saved, "state_dict": {}}, path)
    with pytest.warns(UserWarning, match="contains no parameters"):
        BoringModel.load_from_checkpoint(path, strict=False)


def test_an_optimizer_whose_step_needs_a_closure_gets_one_with_grad_enabled(tmp_path: Path) -> None:
    class NoGradAdamW(torch.optim.AdamW):  # as Hugging Face's: step under no_grad, closure required
        @torch.no_grad()
        def step(self, closure: Any) -> Any:  # type: ignore[override]
            closure()
            return super().step()

    class Model(BoringModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            assert torch.is_grad_enabled()
            return super().training_step(batch, batch_idx)

        def configure_optimizers(self) -> Any:
            return NoGradAdamW(self.parameters(), lr=0.1)

    model = Model()
    before = model.layer.weight.detach().clone()
    small(tmp_path).fit(model)
    assert not torch.equal(before, model.layer.weight)


def test_optimizer_step_that_skips_the_closure_is_refused(tmp_path: Path) -> None:
    class Skips(BoringModel):
        def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
            pass  # neither steps nor runs the closure

    with pytest.raises(trainer.exceptions.MisconfigurationException, match="The closure hasn't been executed"):
        small(tmp_path).fit(Skips())


def test_setup_and_teardown_get_lightnings_stage_enum(tmp_path: Path) -> None:
    stages: list[Any] = []

    class Records(BoringModel):
        def setup(self, stage: str) -> None:
            stages.append(stage)

        def teardown(self, stage: str) -> None:
            stages.append(stage)

    small(tmp_path).fit(Records())
    assert stages == ["fit", "fit"]  # compares as the string
    assert [s.value for s in stages] == ["fit", "fit"]  # and is Lightning's TrainerFn
    assert all(isinstance(s, trainer.states.TrainerFn) for s in stages)


def test_two_stateful_callbacks_with_one_state_key_are_refused() -> None:
    class Stateful(trainer.Callback):
        def state_dict(self) -> dict[str, Any]:
            return {"n": 1}

    with pytest.raises(RuntimeError, match="Found more than one stateful callback of type `Stateful`"):
        trainer.Trainer(accelerator="cpu", callbacks=[Stateful(), Stateful()])
    trainer.Trainer(accelerator="cpu", callbacks=[trainer.Callback(), trainer.Callback()])  # stateless: fine


def test_tensorboard_logs_the_graph_of_a_module_not_fitted_yet(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    logger = trainer.loggers.TensorBoardLogger(tmp_path, log_graph=True)
    logger.log_graph(BoringModel(), torch.rand(2, 32))
    logger.finalize("success")
    assert list(Path(logger.log_dir).glob("events.out.tfevents.*"))
