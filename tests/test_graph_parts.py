"""The parts of ``Trainer(cuda_graph=True)`` that need no GPU: the refusals, capturable optimizers and their
checkpoints, device learning rates, batch signatures and static inputs, the log tape, the offending line,
the summary. ``tests/test_graph_step.py`` runs the captured step through the Trainer on a CPU fake;
``tests/test_cuda_graph.py`` checks it on a GPU."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest
import torch

import trainer
import trainer.graphs.backend as backend
from tests import models
from tests.fake_graphs import FakeGraphs
from trainer.graphs.checks import check_fit
from trainer.graphs.inputs import StaticInputs, Uncapturable, signature
from trainer.graphs.lines import error_line, user_line
from trainer.graphs.optimizers import DeviceLearningRates, make_capturable
from trainer.graphs.summary import FULL, RARE, WARMING, GraphSummary
from trainer.graphs.tape import NotReplayable, Recording, fresh_copies, standing_in
from trainer.results import Results

ROOT = Path(__file__).resolve().parents[1]


# ---- refusals at Trainer(...) ------------------------------------------------------------------------
def test_import_trainer_does_not_import_the_graph_machinery() -> None:
    code = "import sys, trainer; trainer.Trainer(logger=False); print([m for m in sys.modules if 'er.graphs' in m])"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_without_cuda_the_flag_is_a_clear_error_at_trainer() -> None:
    with pytest.raises(ValueError, match=r"cuda_graph=True captures the training step as a CUDA graph, but this "
                       r"Trainer runs on cpu\. Train on a CUDA GPU"):  # fmt: skip
        trainer.Trainer(accelerator="cpu", cuda_graph=True)
    with pytest.raises(TypeError, match=r"cuda_graph='yes' must be True or False"):
        trainer.Trainer(accelerator="cpu", cuda_graph="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (dict(strategy="ddp", devices=2), r"strategy='ddp' runs 2 process\(es\) on 2 device\(s\).*cuda-graphs\.md"),
        (dict(precision="16-mixed"), r"precision='16-mixed': the GradScaler .* Use precision='bf16-mixed'"),
        (dict(on_nonfinite_loss="skip"), r"on_nonfinite_loss='skip'.* Use on_nonfinite_loss='raise'"),
        (dict(detect_anomaly=True), r"detect_anomaly=True: anomaly detection reads every gradient on the host"),
    ],
)
def test_flags_a_captured_step_cannot_honour_are_refused(
    monkeypatch: pytest.MonkeyPatch, flags: dict[str, Any], message: str
) -> None:
    monkeypatch.setattr(backend, "check_device", lambda device: None)  # as if on a GPU
    warns = pytest.warns(UserWarning) if flags.get("precision") == "16-mixed" else contextlib.nullcontext()
    with warns, pytest.raises(ValueError, match=message):  # fp16 on the CPU warns first
        trainer.Trainer(accelerator="cpu", cuda_graph=True, **flags)
    assert trainer.Trainer(accelerator="cpu", cuda_graph=True, precision="bf16-mixed").cuda_graph is True


def test_the_cli_reaches_the_flag(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("jsonargparse", reason="the CLI needs jsonargparse: pip install 'jsonargparse[signatures]'")
    from tests.cli_fixtures.tiny import Data, Model
    from trainer.cli import CLI

    with pytest.raises(SystemExit) as exit_info:
        CLI(Model, Data, args=["--trainer.cuda_graph", "true", "--trainer.accelerator", "cpu"], run=False)
    assert exit_info.value.code == 2
    assert "cuda_graph=True captures the training step as a CUDA graph" in capsys.readouterr().err
    monkeypatch.setattr(backend, "check_device", lambda device: None)
    cli = CLI(Model, Data, args=["--trainer.cuda_graph", "true", "--trainer.logger", "false"], run=False)
    assert cli.trainer.cuda_graph is True


class Manual(models.Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False


class OwnStep(models.Regressor):
    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_step(*args, **kwargs)


@pytest.mark.parametrize(
    ("module", "message"),
    [
        (Manual(), r"Manual sets automatic_optimization=False"),
        (OwnStep(), r"OwnStep overrides optimizer_step"),
    ],
)
def test_steps_a_graph_cannot_capture_are_refused_at_fit(module: trainer.Module, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_fit(module)
    check_fit(models.Regressor())


# ---- optimizers -----------------------------------------------------------------------------------------
def adam_with_state(**kwargs: Any) -> tuple[torch.nn.Linear, torch.optim.Adam]:
    net = torch.nn.Linear(2, 1)
    optimizer = torch.optim.Adam(net.parameters(), lr=0.1, **kwargs)
    net(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    return net, optimizer


def test_adam_becomes_capturable_and_its_checkpoint_keeps_the_users_settings() -> None:
    _, optimizer = adam_with_state()
    make_capturable(optimizer)
    assert optimizer.defaults["capturable"] and all(g["capturable"] for g in optimizer.param_groups)
    saved = optimizer.state_dict()
    assert [g["capturable"] for g in saved["param_groups"]] == [False]
    assert optimizer.param_groups[0]["capturable"] is True  # the live groups are untouched
    optimizer.add_param_group({"params": [torch.nn.Parameter(torch.ones(1))]})  # e.g. BaseFinetuning
    assert optimizer.param_groups[1]["capturable"] is True
    assert [g["capturable"] for g in optimizer.state_dict()["param_groups"]] == [False, False]


def test_a_loaded_checkpoint_keeps_the_optimizer_capturable_with_its_steps_on_the_device() -> None:
    _, eager = adam_with_state()
    saved = eager.state_dict()
    params = [torch.nn.Parameter(torch.zeros(1, 2, device="meta")), torch.nn.Parameter(torch.zeros(1, device="meta"))]
    resumed = torch.optim.Adam(params, lr=0.1)  # "meta" stands in for the GPU: only where tensors go is read
    make_capturable(resumed)
    resumed.load_state_dict(saved)
    assert resumed.param_groups[0]["capturable"] is True
    assert {state["step"].device.type for state in resumed.state.values()} == {"meta"}  # torch's capturable rule
    assert saved["param_groups"][0]["capturable"] is False  # the caller's dict is not changed


def test_sgd_gets_its_fused_kernel_and_keeps_its_own_settings_in_checkpoints() -> None:
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1, momentum=0.9, foreach=True)
    make_capturable(optimizer)
    assert optimizer.param_groups[0]["fused"] is True and optimizer.param_groups[0]["foreach"] is False
    group = optimizer.state_dict()["param_groups"][0]
    assert (group["fused"], group["foreach"]) == (None, True)


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda p: torch.optim.LBFGS(p), "LBFGS"),
        (lambda p: torch.optim.Adagrad(p), "Adagrad"),
        (lambda p: torch.optim.Adam(p, differentiable=True), r"Adam\(differentiable=True\)"),
    ],
)
def test_an_optimizer_that_cannot_be_captured_is_named(make: Any, name: str) -> None:
    with pytest.raises(ValueError, match=f"cuda_graph=True cannot capture {name}"):
        make_capturable(make(torch.nn.Linear(2, 1).parameters()))


def test_device_learning_rates_follow_the_scheduler_and_the_groups_keep_their_floats() -> None:
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.5)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.1)
    rates = DeviceLearningRates(optimizer, torch.device("cpu"))
    seen = []
    for _ in range(3):
        with rates.installed():
            lr = optimizer.param_groups[0]["lr"]
            assert lr is rates.tensors[0] and lr.dtype == torch.float32
            seen.append(lr.item())
        assert isinstance(optimizer.param_groups[0]["lr"], float) and rates.assigned is None
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([0.5, 0.05, 0.005])
    assert scheduler.get_last_lr() == pytest.approx([0.0005])  # the scheduler computed with floats throughout


def test_a_learning_rate_the_step_assigns_itself_is_kept_and_reported() -> None:
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.5)
    user_tensor = torch.tensor(0.25)  # a CPU tensor is read like a float and given back as itself
    optimizer.add_param_group({"params": [torch.nn.Parameter(torch.ones(1))], "lr": user_tensor})
    rates = DeviceLearningRates(optimizer, torch.device("cpu"))
    with rates.installed():
        assert rates.tensors[1].item() == 0.25
        optimizer.param_groups[0]["lr"] = 0.01  # a warm-up written in on_before_optimizer_step
    assert rates.assigned == 0 and optimizer.param_groups[0]["lr"] == 0.01
    assert optimizer.param_groups[1]["lr"] is user_tensor


# ---- batch signatures and static inputs ----------------------------------------------------------------
def test_the_signature_is_the_structure_shapes_dtypes_and_devices_not_the_other_leaves() -> None:
    def batch(n: int, names: list[str], dtype: torch.dtype = torch.float32) -> dict[str, Any]:
        return {"x": torch.zeros(n, 3, dtype=dtype), "y": torch.zeros(n, dtype=torch.long), "names": names}

    same = signature(batch(4, ["a", "b"]))[0]
    assert same == signature(batch(4, ["c", "d"]))[0] and hash(same) == hash(signature(batch(4, ["c", "d"]))[0])
    assert same != signature(batch(3, ["a", "b"]))[0]  # a partial last batch
    assert same != signature(batch(4, ["a", "b"], torch.float64))[0]
    assert same != signature(batch(4, ["a"]))[0]  # another structure
    moved = signature(batch(4, ["a", "b"]), torch.device("meta"))[0]
    assert moved != same and {m[2].type for m in moved.tensors if m is not None} == {"meta"}
    assert same.describe() == "[(4, 3) float32, (4,) int64]"


def test_a_batch_leaf_moved_by_to_but_not_a_tensor_cannot_be_a_static_input() -> None:
    class Graph:
        def to(self, device: Any) -> Graph:
            return self

    with pytest.raises(Uncapturable, match=r"the batch holds a Graph: moved with \.to"):
        signature((torch.zeros(2), Graph()))


def test_static_inputs_are_filled_in_place_and_bounded() -> None:
    inputs = StaticInputs(limit=1)
    sig, placed = inputs.fill(*signature((torch.ones(2, 2), "a"))) or (None, None)
    buffer = placed[0]
    second = (torch.full((2, 2), 7.0), "b")
    sig_again, placed_again = inputs.fill(*signature(second)) or (None, None)
    assert placed_again[0] is buffer and torch.equal(buffer, second[0]) and placed_again[1] == "b"
    assert buffer is not second[0]  # a copy: the loader's tensor is not kept
    assert sig_again is sig  # one object per signature: later comparisons are identity checks
    assert inputs.fill(*signature((torch.ones(3, 2), "c"))) is None  # a second signature: no room


def test_the_mover_places_the_batch_and_its_signature_is_not_computed_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = StaticInputs(limit=4)
    move = inputs.mover(torch.device("cpu"), fallback=None)
    batch = (torch.ones(2), torch.zeros(2))
    placed = move(batch)
    assert placed[0] is not batch[0] and torch.equal(placed[0], batch[0])
    monkeypatch.setattr("trainer.graphs.inputs.signature", lambda *a: pytest.fail("signature computed again"))
    sig, again = inputs.place(placed) or (None, None)
    assert again is placed and sig in inputs.buffers


# ---- the tape ------------------------------------------------------------------------------------------
class Holder:
    def __init__(self) -> None:
        self.results = Results("train")
        self.deferred = Deferred()


class Deferred:
    def __init__(self) -> None:
        self.records: list[tuple[float, int]] = []

    def record(self, loss: torch.Tensor, step: int) -> None:
        self.records.append((float(loss), step))


def test_recorded_log_calls_are_made_again_after_each_replay_with_fresh_values() -> None:
    holder, recording = Holder(), Recording()
    static = torch.tensor(1.0)
    with standing_in((holder, "results"), (holder, "deferred"), recording, "record"):
        holder.results.log("loss", static, None, None, True, True, False, None, "mean", True)
        holder.results.log("lr", 0.1, None, None, False, True, False, None, "mean", True)
        holder.deferred.record(static, 0)
    assert isinstance(holder.results, Results) and not holder.results.step_values  # nothing passed on at capture
    recording.keep_result({"loss": static}, static)
    for step, value in enumerate((2.0, 3.0)):
        static.fill_(value)  # what a replay writes
        fresh = fresh_copies(recording.statics())
        recording.replay_calls(holder.results, holder.deferred, fresh, step)
        output, loss = recording.result(fresh)
        assert output["loss"] is loss and loss is not static and float(loss) == value
        assert holder.results.step_values["loss"] is not static and float(holder.results.step_values["loss"]) == value
    assert holder.results.prog_bar == {"loss"} and float(holder.results.step_values["lr"]) == pytest.approx(0.1)
    assert holder.deferred.records == [(2.0, 0), (3.0, 1)] and recording.numbers == ["lr"]
    assert len(recording.statics()) == 1  # one copy serves the output, the log and the check


def test_a_refilling_rerun_writes_into_the_recorded_tensors_in_order() -> None:
    holder, recording = Holder(), Recording()
    static = torch.tensor(1.0)
    with standing_in((holder, "results"), None, recording, "record"):
        holder.results.log("a", static)
    with standing_in((holder, "results"), None, recording, "refill"):
        holder.results.log("a", torch.tensor(5.0))
    assert float(static) == 5.0
    refilling = standing_in((holder, "results"), None, recording, "refill")
    with pytest.raises(NotReplayable, match="logged 'b' where the captured one logged otherwise"), refilling:
        holder.results.log("b", torch.tensor(5.0))
    assert isinstance(holder.results, Results)  # put back after the error


def test_a_metric_logged_inside_the_step_is_noted_while_warming_up_and_refused_at_capture() -> None:
    class Metric:
        _forward_cache = torch.tensor(0.5)

        def compute(self) -> torch.Tensor:
            return torch.tensor(0.5)

        def reset(self) -> None:
            pass

    holder, recording = Holder(), Recording()
    with standing_in((holder, "results"), None, recording, "observe"):
        holder.results.log("acc", Metric())
    assert "self.log('acc', <Metric>) inside the step" in (recording.problem or "")
    assert "acc" in holder.results.step_values  # a warm-up step logs as the eager step does
    with pytest.raises(NotReplayable), standing_in((holder, "results"), None, Recording(), "record"):
        holder.results.log("acc", Metric())


# ---- the offending line, the summary -------------------------------------------------------------------
def reads_on_the_host(loss: torch.Tensor) -> float:
    return loss.item()  # the line the watch must name


def test_the_watch_names_the_users_line_and_ignores_the_trainers_own_cpu_reads() -> None:
    with FakeGraphs().watch_host_reads() as watch:
        torch.ones(2).sum()
    assert watch.found is None
    with FakeGraphs().watch_host_reads() as watch:
        reads_on_the_host(torch.ones(2).sum())
    assert watch.found is not None and watch.found.file == __file__
    assert str(watch.found).endswith("(return loss.item()  # the line the watch must name)")


def test_a_read_inside_torch_called_by_the_trainer_names_torchs_line() -> None:
    """E.g. an optimizer whose capturable step reads its tensor learning rate on the host."""
    torch_file = str(Path(torch.__file__).parent / "optim" / "rmsprop.py")
    trainer_file = str(Path(trainer.__file__).parent / "loops" / "step.py")
    stack = [
        traceback.FrameSummary("/home/me/train.py", 9, "<module>", line="fit.fit(model)"),
        traceback.FrameSummary(trainer_file, 200, "inner", line="step()"),
        traceback.FrameSummary(torch_file, 321, "_multi_tensor_rmsprop", line="torch._foreach_addcdiv_(...)"),
    ]
    assert str(user_line(stack)) == f"{torch_file}:321 (torch._foreach_addcdiv_(...))"
    user_code = [*stack[:2], traceback.FrameSummary("/home/me/model.py", 5, "hook", line="x.item()"), stack[2]]
    assert str(user_line(user_code)) == "/home/me/model.py:5 (x.item())"


def test_an_error_is_placed_at_the_users_line_even_when_leaving_the_capture_raised_another() -> None:
    try:
        try:
            reads_on_the_host(torch.ones(2).sum() / torch.zeros(()))  # no error here: the helper raises below
            raise RuntimeError("operation not permitted when stream is capturing")
        finally:
            pass
    except RuntimeError as error:
        try:
            raise RuntimeError("capture invalidated") from None
        except RuntimeError as outer:
            outer.__context__ = error
            line = error_line(outer)
    assert line is not None and line.file == __file__


def test_the_summary_says_what_ran_each_batch_and_why() -> None:
    summary = GraphSummary(replayed=90, captured=2, warm_up=3)
    summary.eager.update({WARMING: 6, RARE: 2, FULL: 1})
    assert summary.total == 101
    assert summary.text() == (
        "steadytrain: cuda_graph: of 101 training batches, 90 replayed a captured graph, 2 were captured, 9 ran "
        "eagerly (1 of a kind beyond the graph cache's size; 2 of a kind seen fewer than 3 times (e.g. a partial "
        "last batch); 6 warming up)."
    )
    summary.fallback = "it waits on the device at train.py:12 (loss.item())"
    assert summary.text().endswith("The step could not be captured: it waits on the device at train.py:12 "
                                   "(loss.item()).")  # fmt: skip
