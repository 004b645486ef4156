"""The UNet-DDP port with wandb logging: the Trainer-based job against the hand-written script it replaces.

Both sides train the recipe's UNet (base 8) on the synthetic Carvana set at scale 0.5 on 2 gloo ranks
(CPU, one thread each), batch 8 per rank, AdamW + cosine schedule, cross-entropy + dice, for the same
batches (default 2 epochs x 15 batches per rank), with wandb offline (``QUIET_WANDB``: no extra threads).
Every step rank 0 logs ``train_loss`` and ``lr``; 5 times per epoch (every 3 batches) both validate on
2 batches per rank and rank 0 logs the all-reduced ``val_loss`` and ``val_dice``, 4 validation images
with their true and predicted masks, a histogram of every parameter's weights and of its gradients (64
parameters: 128 histograms), and writes the recipe's PNG grid of the same samples.

* hand-written: the plain ``torch.distributed`` script (DDP, DistributedSampler, ``wandb.init`` and one
  ``run.log`` dict per step and per validation), launched by torchrun;
* ours: ``recipes/unet_carvana.py``'s ``UNetSegmentation`` (``histogram_every_n_steps`` = the validation
  interval) through ``Trainer(strategy="ddp", devices=2, logger=WandbLogger(offline=True))``, run as
  ``python benchmarks/unet_ddp_wandb.py --worker ours`` (the Trainer starts the second rank itself).

Measured: images/s of training, from the start of the first training batch to the end of the last
(validation and logging included, since the logging is the point; ``wandb.init`` and process start-up
not). Each job is a separate subprocess; rounds alternate which side runs first; the median of per-round
ratios ours/hand-written is reported, with min and max (and, for information, the same for the job's
whole wall time, launch to exit). Target: ratio >= 1.00.

    python benchmarks/unet_ddp_wandb.py [--rounds 3] [--epochs 2] [--batches 15]
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from interleave import interleaved, round_ratios
from logging_overhead import QUIET_WANDB

import trainer
from recipes.carvana import CarvanaDataset, UNet, dice_loss, generate_synthetic_carvana, split_dataset
from recipes.carvana.losses import dice_parts
from recipes.carvana.samples import save_sample_grid
from recipes.unet_carvana import UNetSegmentation
from trainer.loggers import WandbLogger

REPO = Path(__file__).resolve().parent.parent
ROOT = REPO / "data" / "carvana_synth"  # the set benchmarks/unet.py uses
PROJECT = "unet-ddp-wandb"
WORLD = 2
VALIDATIONS_PER_EPOCH = 5
N_CLASSES = 2


def datasets() -> tuple[Dataset[dict[str, torch.Tensor]], Dataset[dict[str, torch.Tensor]]]:
    generate_synthetic_carvana(ROOT, 300, (160, 240), seed=0)  # skips pairs already written
    return split_dataset(CarvanaDataset(ROOT / "imgs", ROOT / "masks", scale=0.5), 10.0, seed=0)


def quiet_wandb(out: Path) -> None:
    """Offline wandb without extra threads, its folders under ``out`` (self-launched ranks inherit this)."""
    for key, value in QUIET_WANDB.items():
        os.environ.setdefault(key, value)
    for name in ("DIR", "DATA_DIR", "CACHE_DIR", "CONFIG_DIR", "ARTIFACT_DIR"):
        os.environ.setdefault(f"WANDB_{name}", str(out / name.lower()))


# ---- hand-written: the script a user writes, launched by torchrun ----------------------------------------
def validate(
    net: torch.nn.parallel.DistributedDataParallel,
    loader: DataLoader[Any],
    args: argparse.Namespace,
    run: Any,
    step: int,
    epoch: int,
) -> None:
    """A few validation batches on every rank, the scores all-reduced; rank 0 logs one dict."""
    import wandb

    net.eval()
    totals = torch.zeros(2 + 2 * N_CLASSES, dtype=torch.float64)  # loss sum, images, dice numerators, denominators
    samples: tuple[torch.Tensor, ...] | None = None
    with torch.inference_mode():
        for i, batch in enumerate(itertools.islice(loader, args.val_batches)):
            logits = net(batch["image"])
            loss = F.cross_entropy(logits, batch["mask"]) + dice_loss(logits, batch["mask"], N_CLASSES)
            predictions = logits.argmax(dim=1)
            numerator, denominator = dice_parts(predictions, batch["mask"], N_CLASSES)
            n = len(batch["image"])
            totals += torch.cat([torch.tensor([float(loss) * n, n]), numerator, denominator])
            if i == 0 and run is not None:
                k = args.samples
                samples = (batch["image"][:k], batch["mask"][:k], predictions[:k])
    dist.all_reduce(totals)
    net.train()
    if run is None:
        return
    numerator, denominator = totals[2 : 2 + N_CLASSES], totals[2 + N_CLASSES :]
    row: dict[str, Any] = {
        "val_loss": float(totals[0] / totals[1]),
        "val_dice": float((numerator / denominator)[1:].nanmean()),
        "epoch": epoch,
        "step": step,
    }
    if samples is not None:
        images, masks, predictions = samples
        row["val/samples"] = [
            wandb.Image(
                image.permute(1, 2, 0).numpy(),
                masks={"ground_truth": {"mask_data": mask.numpy()}, "prediction": {"mask_data": prediction.numpy()}},
            )
            for image, mask, prediction in zip(images, masks, predictions)
        ]
        save_sample_grid(Path(run.dir) / "samples" / f"step{step:05d}.png", images, masks, predictions)
    for name, param in net.module.named_parameters():
        row[f"weights/{name}"] = wandb.Histogram(param.detach().numpy())
        if param.grad is not None:
            row[f"grads/{name}"] = wandb.Histogram(param.grad.numpy())
    run.log(row)


def hand_written(args: argparse.Namespace) -> float | None:
    """Images/s on rank 0, None on the other ranks."""
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net = torch.nn.parallel.DistributedDataParallel(UNet(3, N_CLASSES, bilinear=False, base=args.base))
    optimizer = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    train, val = datasets()
    train_sampler: DistributedSampler[dict[str, torch.Tensor]] = DistributedSampler(
        train, world, rank, shuffle=True, seed=0
    )
    train_loader = DataLoader(train, batch_size=args.batch_size, sampler=train_sampler)
    val_loader = DataLoader(
        val, batch_size=args.batch_size, sampler=DistributedSampler(val, world, rank, shuffle=False)
    )
    run = None
    if rank == 0:
        import wandb

        run = wandb.init(project=PROJECT, dir=str(args.out), mode="offline")
    every = args.batches // VALIDATIONS_PER_EPOCH
    step = 0
    dist.barrier()
    start = time.perf_counter()
    for epoch in range(args.epochs):
        train_sampler.set_epoch(epoch)
        for i, batch in enumerate(itertools.islice(train_loader, args.batches)):
            logits = net(batch["image"])
            loss = F.cross_entropy(logits, batch["mask"]) + dice_loss(logits, batch["mask"], N_CLASSES)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if run is not None:
                run.log(
                    {"train_loss": loss.item(), "lr": optimizer.param_groups[0]["lr"], "epoch": epoch, "step": step}
                )
            if (i + 1) % every == 0:
                validate(net, val_loader, args, run, step, epoch)
        scheduler.step()
    dist.barrier()
    elapsed = time.perf_counter() - start
    if run is not None:
        run.finish()
    dist.destroy_process_group()
    return args.epochs * args.batches * args.batch_size * world / elapsed if rank == 0 else None


# ---- ours: the recipe through the Trainer, self-launched -------------------------------------------------
class Clock(trainer.Callback):
    """From the first training batch to the end of the last (its validation and logging included)."""

    def __init__(self) -> None:
        self.start: float | None = None
        self.elapsed = 0.0

    def on_train_start(self, trainer: trainer.Trainer, module: trainer.Module) -> None:
        """Start the wandb run now, outside the clock, as the hand-written script's ``wandb.init`` is."""
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                if isinstance(logger, WandbLogger):
                    logger.experiment  # noqa: B018

    def on_train_epoch_start(self, trainer: trainer.Trainer, module: trainer.Module) -> None:
        if self.start is None:
            trainer.strategy.barrier()
            self.start = time.perf_counter()

    def on_train_epoch_end(self, trainer: trainer.Trainer, module: trainer.Module) -> None:
        if trainer.current_epoch + 1 == trainer.max_epochs:
            trainer.strategy.barrier()
            assert self.start is not None
            self.elapsed = time.perf_counter() - self.start


def ours(args: argparse.Namespace) -> float | None:
    """Images/s on rank 0, None on the other ranks."""
    every = args.batches // VALIDATIONS_PER_EPOCH
    train, val = datasets()
    torch.manual_seed(0)
    module = UNetSegmentation(base=args.base, n_sample_images=args.samples, histogram_every_n_steps=every)
    clock = Clock()
    fit = trainer.Trainer(
        accelerator="cpu",
        strategy="ddp",
        devices=WORLD,
        max_epochs=args.epochs,
        limit_train_batches=args.batches,
        val_check_interval=every,
        limit_val_batches=args.val_batches,
        log_every_n_steps=1,
        logger=WandbLogger(project=PROJECT, save_dir=str(args.out), offline=True),
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[clock],
    )
    train_loader = DataLoader(
        train, batch_size=args.batch_size, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    fit.fit(module, train_loader, DataLoader(val, batch_size=args.batch_size))
    images = args.epochs * args.batches * args.batch_size * fit.world_size
    return images / clock.elapsed if fit.is_global_zero else None


# ---- the driver ------------------------------------------------------------------------------------------
def one_run(side: str, args: argparse.Namespace, walls: dict[str, list[float]]) -> float:
    """One job as a subprocess; returns its images/s and records its wall time, launch to exit."""
    launcher = [] if side == "ours" else ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(WORLD)]
    with tempfile.TemporaryDirectory() as out:
        cmd = [
            sys.executable,
            *launcher,
            str(Path(__file__).resolve()),
            "--worker",
            side,
            "--out",
            out,
            *("--epochs", str(args.epochs), "--batches", str(args.batches), "--val-batches", str(args.val_batches)),
            *("--batch-size", str(args.batch_size), "--base", str(args.base), "--samples", str(args.samples)),
        ]
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **QUIET_WANDB})
        walls[side].append(time.perf_counter() - start)
    match = re.search(r"images_per_s=([\d.]+)", done.stdout)
    if done.returncode or not match:
        sys.exit(f"{side} failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}")
    return float(match.group(1))


def drive(args: argparse.Namespace) -> None:
    datasets()  # written once here, before two ranks could race to write it
    walls: dict[str, list[float]] = {"hand": [], "ours": []}
    hand, our = interleaved(lambda: one_run("hand", args, walls), lambda: one_run("ours", args, walls), args.rounds)
    every = args.batches // VALIDATIONS_PER_EPOCH
    print(
        f"UNet base {args.base}, {WORLD} gloo ranks x 1 thread, batch {args.batch_size}/rank, {args.epochs} epochs x"
        f" {args.batches} batches, a validation ({args.val_batches} batches/rank) every {every} batches, wandb offline"
    )
    print(f"hand-written DDP + wandb (torchrun)    : {statistics.median(hand):7.1f} images/s (median of {args.rounds})")
    print(f"Trainer + WandbLogger (self-launched)  : {statistics.median(our):7.1f} images/s")
    median, low, high = round_ratios(hand, our)
    print(
        f"ratio ours/hand-written images/s       : {median:.3f} (median of {args.rounds} per-round ratios;"
        f" min {low:.3f}, max {high:.3f}; target >= 1.00)"
    )
    median, low, high = round_ratios(walls["hand"], walls["ours"])
    print(
        f"job wall time, launch to exit (info)   : hand-written {statistics.median(walls['hand']):.1f} s,"
        f" ours {statistics.median(walls['ours']):.1f} s, ratio ours/hand-written {median:.3f}"
        f" (min {low:.3f}, max {high:.3f}; lower is better)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", choices=("hand", "ours"), help="run one job (default: the driver)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batches", type=int, default=15, help="training batches per rank and epoch")
    parser.add_argument("--val-batches", type=int, default=2, help="batches per rank and validation")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--base", type=int, default=8, help="UNet width")
    parser.add_argument("--samples", type=int, default=4, help="validation images logged")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "unet_ddp_wandb", help="wandb folders (workers)")
    args = parser.parse_args()
    if args.batches % VALIDATIONS_PER_EPOCH:
        parser.error(f"--batches must be a multiple of {VALIDATIONS_PER_EPOCH} (validations per epoch)")
    if args.worker is None:
        drive(args)
        return
    torch.set_num_threads(1)
    args.out = args.out.resolve()
    quiet_wandb(args.out)
    images_per_s = hand_written(args) if args.worker == "hand" else ours(args)
    if images_per_s is not None:
        print(f"images_per_s={images_per_s:.2f}", flush=True)


if __name__ == "__main__":
    main()
