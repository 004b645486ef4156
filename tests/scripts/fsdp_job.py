"""FSDP scenarios for tests/strategies/test_fsdp_integration.py (self-launched CPU ranks on gloo).

    python fsdp_job.py OUT TAG [--strategy fsdp|ddp|single] [--devices N] [--manual] [--dropout P]
                       [--save-at STEP] [--resume CKPT] [--full-state] [--async-save] [--top-k K]
                       [--hybrid] [--ac] [--offload] [--precision P] [--configure-model] [--stage fit|validate|predict]
                       [--wrap-policy] [--ac-policy] [--sharding-strategy S] [--mesh R,S] [--checkpoint-io]
                       [--no-shuffle] [--empty-init]

Rank r writes ``OUT/<TAG>-rank<r>.pt``: the full weights (by name), the losses, the global step, and what the
strategy's options did (which submodules FSDP wrapped, Linear forward calls, the mesh, whether a sharded layer's
weight was gathered after forward, the files a custom CheckpointIO wrote).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FSDPModule, ShardingStrategy, fully_shard
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader, TensorDataset

import trainer
from trainer.plugins import TorchCheckpointIO
from trainer.strategies.fsdp import FSDPStrategy


def data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return TensorDataset(x, x.sum(dim=1, keepdim=True).tanh())


class Net(trainer.Module):
    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 32),  # 288 parameters: sharded on its own (threshold 100)
            torch.nn.Tanh(),
            torch.nn.Dropout(dropout),
            torch.nn.Linear(32, 32),  # 1056: sharded on its own
            torch.nn.Tanh(),
            torch.nn.Linear(32, 1),  # 33: the root's
        )
        self.losses: list[float] = []
        self.linear_calls = 0  # every Linear forward, recomputations included
        self.gathered_after_forward: list[bool] = []  # net[0]'s weight a plain (unsharded) tensor after forward
        for layer in self.net:
            if isinstance(layer, torch.nn.Linear):
                layer.register_forward_pre_hook(self._count)

    def _count(self, *args: Any) -> None:
        self.linear_calls += 1

    def loss(self, batch: Any) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.losses.append(loss.item())
        self.gathered_after_forward.append(not isinstance(self.net[0].weight, DTensor))
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", self.loss(batch), sync_dist=True)

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.net(batch[0])

    def configure_optimizers(self) -> Any:
        opt = torch.optim.AdamW(self.parameters(), lr=0.02, weight_decay=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class ShardsItself(Net):
    """Shards its own layers in ``configure_model``; the strategy then shards only the root."""

    def configure_model(self) -> None:
        if not isinstance(self.net[0], FSDPModule):
            mesh = self.trainer.strategy.device_mesh()  # type: ignore[attr-defined]
            fully_shard(self.net[0], mesh=mesh)
            fully_shard(self.net[3], mesh=mesh)


class ManualNet(Net):
    """Two optimizers stepped by hand. (Clipping in training_step, on 2 ranks of DDP and FSDP against
    one device: tests/scripts/manual_clip.py.)"""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__(dropout)
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        first, second = self.optimizers()  # type: ignore[misc]
        loss = self.loss(batch)
        self.losses.append(loss.item())
        self.manual_backward(loss)
        first.step()
        second.step()
        first.zero_grad()
        second.zero_grad()

    def configure_optimizers(self) -> Any:
        body = [p for n, p in self.named_parameters() if not n.startswith("net.5")]
        return [torch.optim.AdamW(body, lr=0.02, weight_decay=0.1), torch.optim.SGD(self.net[5].parameters(), lr=0.1)]


class SaveAt(trainer.Callback):
    """Save a full checkpoint after global step ``step`` (mid-epoch), as a crash-safe run would."""

    def __init__(self, step: int, path: Path) -> None:
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer: trainer.Trainer, module: Any, outputs: Any, batch: Any, i: int) -> None:
        if trainer.global_step == self.step and not self.path.exists():
            trainer.save_checkpoint(self.path)


class RecordingIO(TorchCheckpointIO):
    """A CheckpointIO of the user's: notes each file it writes (rank 0 writes full checkpoints)."""

    def __init__(self, note: Path) -> None:
        self.note = note

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        with open(self.note, "a") as f:
            f.write(f"{Path(path).name}\n")
        super().save_checkpoint(checkpoint, path, storage_options)


def full_weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole weights on every rank: DTensors (FSDP, tensor parallel) gathered, plain tensors as they are."""
    state = module.state_dict()  # its values are DTensors even where SHARD_GRAD_OP left parameters gathered
    if any(isinstance(v, DTensor) for v in state.values()):
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=False)
        state = get_model_state_dict(module, options=options)
    return {k: v.detach().clone() for k, v in state.items() if isinstance(v, torch.Tensor)}


def callbacks(args: argparse.Namespace) -> list[trainer.Callback]:
    chosen: list[trainer.Callback] = []
    if args.save_at:
        chosen.append(SaveAt(args.save_at, args.out / f"{args.tag}-step{args.save_at}.ckpt"))
    if args.top_k:
        chosen.append(
            trainer.ModelCheckpoint(
                dirpath=args.out / "ckpts", monitor="val_loss", save_top_k=args.top_k, save_last=True
            )
        )
    if args.schedule:
        chosen.append(trainer.callbacks.GradientAccumulationScheduler({1: 3}))
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("tag")
    parser.add_argument("--strategy", default="fsdp")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--manual", action="store_true")
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--save-at", type=int, default=0)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--full-state", action="store_true")
    parser.add_argument("--async-save", action="store_true")
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--hybrid", action="store_true")
    parser.add_argument("--ac", action="store_true", help="activation checkpointing of the Linear blocks")
    parser.add_argument("--offload", action="store_true")
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--configure-model", action="store_true")
    parser.add_argument("--stage", default="fit", choices=["fit", "validate", "predict"])
    parser.add_argument("--schedule", action="store_true", help="GradientAccumulationScheduler({1: 3})")
    parser.add_argument("--wrap-policy", action="store_true", help="auto_wrap_policy={Linear}")
    parser.add_argument("--ac-policy", action="store_true", help="activation_checkpointing_policy={Linear}")
    parser.add_argument("--sharding-strategy", default=None, help="a name, or enum:NAME for torch's enum")
    parser.add_argument("--mesh", default=None, help="device_mesh as R,S")
    parser.add_argument("--checkpoint-io", action="store_true", help="a CheckpointIO that notes its writes")
    parser.add_argument("--no-shuffle", action="store_true", help="in order: 2x4 samples are 1x8's batch")
    parser.add_argument("--empty-init", action="store_true", help="build under init_module(empty_init=True)")
    args = parser.parse_args()
    torch.manual_seed(0)
    strategy: Any = args.strategy
    if args.strategy == "fsdp":
        sharding_strategy: Any = args.sharding_strategy
        if sharding_strategy and sharding_strategy.startswith("enum:"):
            sharding_strategy = ShardingStrategy[sharding_strategy.removeprefix("enum:")]
        strategy = FSDPStrategy(
            min_params_to_shard=None if args.wrap_policy else 100,
            auto_wrap_policy={torch.nn.Linear} if args.wrap_policy else None,
            activation_checkpointing_policy={torch.nn.Linear} if args.ac_policy else None,
            sharding_strategy=sharding_strategy,
            device_mesh=tuple(int(n) for n in args.mesh.split(",")) if args.mesh else None,  # type: ignore[arg-type]
            checkpoint_io=RecordingIO(args.out / f"{args.tag}-io.txt") if args.checkpoint_io else None,
            state_dict_type="full" if args.full_state else "sharded",
            async_save=args.async_save,
            sharding="hybrid" if args.hybrid else "full",
            activation_checkpointing={torch.nn.Linear} if args.ac else (),
            cpu_offload=args.offload,
        )
    fit = trainer.Trainer(
        accelerator="cpu",
        precision=args.precision,
        strategy=strategy,
        devices=args.devices,
        max_epochs=2,
        accumulate_grad_batches=1 if args.manual or args.schedule else 2,
        gradient_clip_val=None if args.manual else 0.1,  # small: it clips most steps
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=bool(args.top_k),
        enable_model_summary=False,
        callbacks=callbacks(args),
    )
    with fit.init_module(empty_init=args.empty_init):
        module = (ManualNet if args.manual else ShardsItself if args.configure_model else Net)(args.dropout)
    built_on_meta = all(p.is_meta for p in module.parameters())
    per_rank = 8 // args.devices
    train = DataLoader(data(64, 0), batch_size=per_rank, shuffle=not args.no_shuffle)
    val = DataLoader(data(20, 1), batch_size=per_rank)
    result: dict[str, Any] = {}
    if args.stage == "fit":
        fit.fit(module, train, val, ckpt_path=args.resume)
    elif args.stage == "validate":
        result["validate"] = fit.validate(module, val, ckpt_path=args.resume)
    else:
        result["predict"] = torch.cat(fit.predict(module, val, ckpt_path=args.resume))  # type: ignore[arg-type]
    result.update(
        params=full_weights(module),
        losses=module.losses,
        global_step=fit.global_step,
        world_size=fit.world_size,
        metrics={k: float(v) for k, v in fit.callback_metrics.items()},
        wrapped=[name for name, m in module.named_modules() if isinstance(m, FSDPModule)],
        linear_calls=module.linear_calls,
        gathered_after_forward=module.gathered_after_forward,
        built_on_meta=built_on_meta,
        meta_left=[n for n, t in [*module.named_parameters(), *module.named_buffers()] if t.is_meta],
    )
    if isinstance(fit.strategy, FSDPStrategy):
        result["mesh"] = tuple(fit.strategy.device_mesh().shape)
        weight = module.net[0].weight
        result["local_share"] = weight.to_local().numel() / weight.numel()  # 0.5: sharded over 2; 1: whole
    torch.save(result, args.out / f"{args.tag}-rank{fit.global_rank}.pt")


if __name__ == "__main__":
    main()
