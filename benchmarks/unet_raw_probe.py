"""Learnability probe: a tiny UNet on synthetic Carvana with a plain PyTorch loop (no trainer).

Answers "which size/scale/width reaches validation dice >= 0.90 within a CPU time budget" and gives the
raw-loop seconds per epoch that the trainer's overhead will later be measured against.

    python -m benchmarks.unet_raw_probe --scale 0.5 --base 8 --time-budget 90
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from recipes.carvana import CarvanaDataset, UNet, dice_loss, generate_synthetic_carvana, make_dice_metric
from recipes.carvana import split_dataset as split


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=Path, default=Path("data/carvana_synth"))
    p.add_argument("--n-images", type=int, default=300)
    p.add_argument("--size", type=int, nargs=2, default=(160, 240), metavar=("H", "W"))
    p.add_argument("--scale", type=float, default=0.5)
    p.add_argument("--base", type=int, default=8, help="UNet width of the first stage")
    p.add_argument("--bilinear", action="store_true")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--time-budget", type=float, default=90.0, help="stop after the epoch that crosses it (s)")
    p.add_argument("--max-epochs", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def make_loaders(args: argparse.Namespace) -> tuple[DataLoader, DataLoader]:
    root = generate_synthetic_carvana(args.root, args.n_images, tuple(args.size), seed=0)
    train, val = split(CarvanaDataset(root / "imgs", root / "masks", scale=args.scale), 10.0, seed=0)
    g = torch.Generator().manual_seed(args.seed)
    kw = {"batch_size": args.batch_size, "num_workers": args.workers}
    return DataLoader(train, shuffle=True, generator=g, **kw), DataLoader(val, **kw)


def train_epoch(model: nn.Module, loader: DataLoader, opt: torch.optim.Optimizer) -> float:
    """One pass; loss = cross-entropy + soft dice, as in the reference recipe. Returns mean loss."""
    model.train()
    total = 0.0
    for batch in loader:
        logits = model(batch["image"])
        loss = F.cross_entropy(logits, batch["mask"]) + dice_loss(logits, batch["mask"], n_classes=2)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        total += loss.item()
    return total / len(loader)


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader) -> float:
    """Global foreground dice over the whole validation set."""
    model.eval()
    metric = make_dice_metric(n_classes=2)
    for batch in loader:
        metric.update(model(batch["image"]).argmax(dim=1), batch["mask"])
    return float(metric.compute())


def fit(model: nn.Module, loaders: tuple[DataLoader, DataLoader], lr: float, budget: float, epochs: int) -> None:
    """Train until the epoch that crosses `budget` seconds; print per-epoch loss, dice and timings."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    start, first_hit = time.perf_counter(), None
    for epoch in range(1, epochs + 1):
        t0 = time.perf_counter()
        loss = train_epoch(model, loaders[0], opt)
        t_train = time.perf_counter() - t0
        dice = evaluate(model, loaders[1])
        elapsed = time.perf_counter() - start
        if first_hit is None and dice >= 0.9:
            first_hit = (epoch, round(elapsed, 1))
        print(f"epoch {epoch:3d}  loss {loss:.4f}  val_dice {dice:.4f}  ", end="")
        print(f"train {t_train:5.1f}s  total {elapsed:6.1f}s", flush=True)
        if elapsed >= budget:
            break
    print(f"final val_dice {dice:.4f} after {epoch} epochs, {elapsed:.1f}s; dice>=0.90 first at {first_hit}")


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    loaders = make_loaders(args)
    model = UNet(3, 2, bilinear=args.bilinear, base=args.base)
    h, w = (int(s * args.scale) for s in args.size)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"input {h}x{w} (size {args.size}, scale {args.scale}), base={args.base}, params={n_params:,}")
    fit(model, loaders, args.lr, args.time_budget, args.max_epochs)


if __name__ == "__main__":
    main()
