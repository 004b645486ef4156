"""DataParallelStrategy: its logic on CPU (no GPU needed), and a real DataParallel run on CUDA."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist
from torch import nn

from trainer.strategies.dp import DataParallelStrategy, mean_of_replicas
from trainer.strategies.step_wrapper import StepWrapper


class Steps(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.mse_loss(self.lin(x), y)

    def validation_step(self, batch: object, batch_idx: int) -> str:
        return f"validation {batch_idx}"

    def test_step(self, batch: object, batch_idx: int) -> str:
        return f"test {batch_idx}"

    def predict_step(self, batch: object, batch_idx: int) -> str:
        return f"predict {batch_idx}"


def cpu_strategy(module: nn.Module) -> DataParallelStrategy:
    """The strategy around a DataParallel (without GPUs it calls the module directly; with one, it moves it there)."""
    strategy = DataParallelStrategy()
    strategy.module = module
    strategy.model = nn.DataParallel(StepWrapper(module))
    return strategy


def batch(rows: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(rows, 3, generator=g), torch.randn(rows, 1, generator=g)


def test_needs_cuda() -> None:
    with pytest.raises(ValueError, match=r"strategy='dp' needs CUDA GPUs .* strategy='ddp' \(gloo\) with devices=N"):
        DataParallelStrategy().configure("cpu", [0, 1])


def test_one_machine_only() -> None:
    with pytest.raises(ValueError, match="num_nodes=2 use 'ddp'"):
        DataParallelStrategy().configure("cuda", [0, 1], num_nodes=2)


def test_root_device_is_first_gpu() -> None:
    strategy = DataParallelStrategy()
    strategy.configure("cuda", [2, 3])
    assert strategy.root_device == torch.device("cuda", 2)


@pytest.mark.parametrize("stage", ["training", "validation", "test", "predict"])
def test_wrapper_dispatches_each_stage_as_a_plain_call(stage: str) -> None:
    module = Steps()
    output = StepWrapper(module)(batch(), 7, stage)
    if stage == "training":
        assert torch.equal(output, module.training_step(batch(), 7))
    else:
        assert output == f"{stage} 7"


def test_gathered_loss_vector_is_averaged() -> None:
    assert mean_of_replicas(torch.tensor([1.0, 3.0])).item() == 2.0
    gathered = {"loss": torch.tensor([1.0, 3.0]), "acc": torch.tensor([0.5, 1.0])}
    reduced = mean_of_replicas(gathered)
    assert reduced["loss"].item() == 2.0 and torch.equal(reduced["acc"], gathered["acc"])
    scalar = torch.tensor(4.0)
    assert mean_of_replicas(scalar) is scalar  # one replica: nothing was gathered
    assert mean_of_replicas(None) is None


def test_steps_run_through_the_wrapper() -> None:
    module = Steps()
    strategy = cpu_strategy(module)
    data = batch()
    assert strategy.batch_to_device(data) is data  # DataParallel scatters it
    device = next(module.parameters()).device  # cuda:0 where a GPU is: DataParallel moved the module there
    expected = module.training_step(tuple(t.to(device) for t in data), 0)
    assert torch.equal(strategy.step_function("training")(data, 0).cpu(), expected.cpu())
    assert strategy.step_function("validation")(data, 2) == "validation 2"


def test_state_dict_has_no_wrapper_prefix() -> None:
    module = Steps()
    strategy = cpu_strategy(module)
    assert list(strategy.module_state_dict()) == ["lin.weight", "lin.bias"]
    assert strategy.model is not None
    assert list(strategy.model.state_dict()) == ["module.module.lin.weight", "module.module.lin.bias"]


def test_manual_optimization_is_refused_before_fit_sets_anything_up() -> None:
    module = Steps()
    strategy = cpu_strategy(module)
    strategy.check_fit(module)  # automatic optimization (no attribute: the default) is fine
    module.automatic_optimization = False  # type: ignore[assignment]
    with pytest.raises(ValueError, match=r"cannot run under strategy='dp': each replica would step"):
        strategy.check_fit(module)


def test_collectives_are_one_process_no_ops() -> None:
    strategy = DataParallelStrategy()
    value = torch.tensor([1.0, 2.0])
    assert strategy.all_reduce(value, "sum") is value
    assert strategy.all_gather(value).shape == (1, 2)
    assert strategy.broadcast({"a": 1}) == {"a": 1}
    assert strategy.gather_objects({"a": 1}) == [{"a": 1}]
    assert strategy.reduce_boolean_decision(True) and not strategy.reduce_boolean_decision(False)
    assert strategy.world_size == 1 and strategy.is_global_zero


def test_barrier_waits_for_no_one() -> None:
    """One process: the barrier must neither start a process group nor wait for a rank that does not
    exist; a real collective here would hang or raise."""
    strategy = DataParallelStrategy()
    strategy.barrier()
    assert strategy.broadcast({"from": 0}) == {"from": 0}
    assert not (dist.is_available() and dist.is_initialized())


def grads(module: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in module.parameters() if p.grad is not None]


def test_no_sync_lets_gradients_accumulate_on_the_users_module() -> None:
    """DataParallel reduces the replicas' gradients inside every backward, so ``no_sync`` must not hold any back:
    a micro-batch's gradients land on the user's module exactly as a plain step's do."""
    module = Steps()
    strategy = cpu_strategy(module)
    step = strategy.step_function("training")
    step(batch(), 0).backward()
    once = grads(module)
    module.zero_grad()
    with strategy.no_sync():
        step(batch(), 0).backward()
    assert len(once) == 2 and all(torch.equal(a, b) for a, b in zip(grads(module), once, strict=True))
    step(batch(), 1).backward()  # the step that closes the window adds onto what no_sync left
    assert all(torch.equal(a, 2 * b) for a, b in zip(grads(module), once, strict=True))


@pytest.mark.cuda
def test_data_parallel_matches_one_device_on_the_full_batch() -> None:
    devices = list(range(torch.cuda.device_count()))
    torch.manual_seed(0)
    module = Steps()
    reference = copy.deepcopy(module).cuda()
    strategy = DataParallelStrategy()
    strategy.configure("cuda", devices)
    strategy.setup_module(module)
    data = batch(8 * len(devices))  # divides evenly: the mean of replica means is the full mean
    loss = strategy.step_function("training")(strategy.batch_to_device(data), 0)
    loss.backward()
    ref_loss = reference.training_step((data[0].cuda(), data[1].cuda()), 0)
    ref_loss.backward()
    assert loss.ndim == 0 and torch.allclose(loss, ref_loss, atol=1e-6)
    for p, q in zip(module.parameters(), reference.parameters()):
        assert p.grad is not None and q.grad is not None
        assert torch.allclose(p.grad, q.grad, atol=1e-6)
    assert list(strategy.module_state_dict()) == ["lin.weight", "lin.bias"]
