"""Soft dice loss for training and hard dice for evaluation.

Evaluation dice here is *global*: intersections and cardinalities are summed over every pixel of every
image before dividing (per class), then classes are averaged. Unlike a mean of per-batch or per-image
scores it does not depend on batch size or on how images are spread over ranks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics.segmentation import DiceScore

EPS = 1e-6


def dice_loss(logits: Tensor, target: Tensor, n_classes: int, multiclass: bool = True) -> Tensor:
    """1 - soft dice, averaged over classes, with sums over the whole batch.

    multiclass: logits (N, C, H, W) -> softmax, target class indices (N, H, W).
    binary: logits (N, 1, H, W) or (N, H, W) -> sigmoid, target in {0, 1}.
    EPS keeps an empty class from dividing by zero (it then scores 1).
    """
    if multiclass:
        probs = logits.softmax(dim=1)
        onehot = F.one_hot(target, n_classes).permute(0, 3, 1, 2).to(probs.dtype)
    else:
        probs = torch.sigmoid(logits).reshape(target.shape).unsqueeze(1)
        onehot = target.to(probs.dtype).unsqueeze(1)
    dims = (0, *range(2, probs.ndim))
    inter = (probs * onehot).sum(dims)
    card = probs.sum(dims) + onehot.sum(dims)
    return 1 - ((2 * inter + EPS) / (card + EPS)).mean()


def dice_parts(pred_labels: Tensor, target: Tensor, n_classes: int) -> tuple[Tensor, Tensor]:
    """Per-class (2 * |P & T|, |P| + |T|) summed over all pixels: additive, so safe to all-reduce."""
    pred = F.one_hot(pred_labels.long(), n_classes).reshape(-1, n_classes)
    true = F.one_hot(target.long(), n_classes).reshape(-1, n_classes)
    return 2 * (pred * true).sum(0), pred.sum(0) + true.sum(0)


def dice_score(pred_labels: Tensor, target: Tensor, n_classes: int, include_background: bool = False) -> Tensor:
    """Global hard dice averaged over classes; classes absent from both prediction and target are skipped."""
    numerator, denominator = dice_parts(pred_labels, target, n_classes)
    dice = numerator.double() / denominator.double()  # 0/0 -> nan, dropped by nanmean
    return (dice if include_background else dice[1:]).nanmean().float()


def make_dice_metric(n_classes: int, include_background: bool = False) -> DiceScore:
    """torchmetrics DiceScore that equals `dice_score` over everything it has seen.

    `aggregation_level="global"` sums the per-image numerators/denominators before dividing (the default
    "samplewise" averages per-image dice instead). Its states are lists gathered with `cat` under DDP,
    so the synced value is exact; only DistributedSampler padding (repeated samples) would bias it.
    """
    return DiceScore(
        num_classes=n_classes,
        include_background=include_background,
        average="macro",
        aggregation_level="global",
        input_format="index",
    )
