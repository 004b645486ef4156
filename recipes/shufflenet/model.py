"""ShuffleNet-v1 style classifier for small images (e.g. 32x32, CIFAR-like).

Grouped 1x1 convolutions are cheap but each output group sees only its input group; a channel shuffle
between them lets information cross groups. `nn.ChannelShuffle(g)` views C channels as a (g, C/g) grid
(row i holds group i) and reads it out column by column, i.e. the output order is the transpose of that
grid: C=6, g=2 gives [0, 3, 1, 4, 2, 5]. Shuffling with g and then with C/g restores the original order.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def conv_bn(in_ch: int, out_ch: int, kernel: int = 1, stride: int = 1, groups: int = 1) -> nn.Sequential:
    """Convolution + BatchNorm, no bias (BatchNorm has one)."""
    conv = nn.Conv2d(in_ch, out_ch, kernel, stride, padding=kernel // 2, groups=groups, bias=False)
    return nn.Sequential(conv, nn.BatchNorm2d(out_ch))


def check_divisible(value: int, groups: int, what: str) -> None:
    """Fail at construction with the offending width, not later with a cryptic conv error."""
    if value % groups:
        raise ValueError(f"{what}={value} must be divisible by groups={groups}")


class ShuffleUnit(nn.Module):
    """Group conv 1x1 -> shuffle -> depthwise 3x3 -> group conv 1x1; add (stride 1) or concat (stride 2).

    With stride 2 the shortcut is a 3x3 average pool and the branch produces only `out - in` channels,
    so the concat widens to `out` at no shortcut cost.
    """

    def __init__(self, in_ch: int, out_ch: int, groups: int, stride: int = 1, first_groups: int | None = None) -> None:
        super().__init__()
        if stride == 1 and in_ch != out_ch:
            raise ValueError("a stride-1 unit adds its input, so in_ch must equal out_ch")
        self.stride = stride
        branch_out = out_ch - in_ch if stride == 2 else out_ch
        mid = out_ch // 4
        g1 = groups if first_groups is None else first_groups
        check_divisible(in_ch, g1, "in_ch")
        check_divisible(mid, groups, "out_ch // 4")
        check_divisible(branch_out, groups, "branch output channels")
        self.reduce = conv_bn(in_ch, mid, groups=g1)
        self.shuffle = nn.ChannelShuffle(g1)
        self.depthwise = conv_bn(mid, mid, kernel=3, stride=stride, groups=mid)
        self.expand = conv_bn(mid, branch_out, groups=groups)

    def forward(self, x: Tensor) -> Tensor:
        y = self.expand(self.depthwise(self.shuffle(F.relu(self.reduce(x)))))
        if self.stride == 2:
            return F.relu(torch.cat([F.avg_pool2d(x, 3, stride=2, padding=1), y], dim=1))
        return F.relu(x + y)


class ShuffleNet(nn.Module):
    """Stem 3x3 conv, stages of ShuffleUnits (each opens with a stride-2 unit), global pool, linear.

    The stem keeps full resolution (no max-pool) because 32x32 inputs are already small. The first unit's
    1x1 conv is ungrouped, as in the paper, since the stem has too few channels to split.
    """

    def __init__(
        self,
        n_classes: int = 10,
        groups: int = 3,
        widths: Sequence[int] = (60, 120, 240),
        depths: Sequence[int] = (2, 3, 2),
        stem: int = 24,
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, stem, kernel=3), nn.ReLU(inplace=True))
        units: list[nn.Module] = []
        in_ch = stem
        for i, (width, depth) in enumerate(zip(widths, depths, strict=True)):
            units.append(ShuffleUnit(in_ch, width, groups, stride=2, first_groups=1 if i == 0 else None))
            units += [ShuffleUnit(width, width, groups) for _ in range(depth - 1)]
            in_ch = width
        self.stages = nn.Sequential(*units)
        self.fc = nn.Linear(in_ch, n_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stages(self.stem(x))
        return self.fc(x.mean(dim=(2, 3)))
