"""UNet for binary/multiclass segmentation, after the milesial/Pytorch-UNet layout.

`base` sets the width of the first stage (64 in the paper); CPU runs use 8 or 16.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class DoubleConv(nn.Sequential):
    """(3x3 conv -> BatchNorm -> ReLU) twice; no conv bias because BatchNorm supplies it."""

    def __init__(self, in_channels: int, out_channels: int, mid_channels: int | None = None) -> None:
        mid = mid_channels or out_channels
        super().__init__(
            nn.Conv2d(in_channels, mid, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(mid),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid, out_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        )


class Down(nn.Sequential):
    """Halve the resolution with 2x2 max-pooling, then DoubleConv."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__(nn.MaxPool2d(2), DoubleConv(in_channels, out_channels))


class Up(nn.Module):
    """Upsample, pad to the skip's size (odd inputs lose a pixel when pooled), concat, DoubleConv."""

    def __init__(self, in_channels: int, out_channels: int, bilinear: bool = False) -> None:
        super().__init__()
        self.up: nn.Module
        if bilinear:
            self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
            self.conv = DoubleConv(in_channels, out_channels, in_channels // 2)
        else:
            self.up = nn.ConvTranspose2d(in_channels, in_channels // 2, kernel_size=2, stride=2)
            self.conv = DoubleConv(in_channels, out_channels)

    def forward(self, x: Tensor, skip: Tensor) -> Tensor:
        x = self.up(x)
        dy = skip.size(2) - x.size(2)
        dx = skip.size(3) - x.size(3)
        x = F.pad(x, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])
        return self.conv(torch.cat([skip, x], dim=1))


class UNet(nn.Module):
    """Four down stages and four up stages with skip connections; returns per-class logits (N, C, H, W).

    Inputs need H, W >= 16 (four poolings). With `bilinear=True` the deepest stage is halved, as in the
    reference, so both modes keep the same skip widths.
    """

    def __init__(self, n_channels: int = 3, n_classes: int = 2, bilinear: bool = False, base: int = 64) -> None:
        super().__init__()
        self.n_channels = n_channels
        self.n_classes = n_classes
        self.bilinear = bilinear
        factor = 2 if bilinear else 1
        w = [base, base * 2, base * 4, base * 8, base * 16]
        self.inc = DoubleConv(n_channels, w[0])
        self.downs = nn.ModuleList([Down(w[0], w[1]), Down(w[1], w[2]), Down(w[2], w[3]), Down(w[3], w[4] // factor)])
        self.ups = nn.ModuleList(
            [
                Up(w[4], w[3] // factor, bilinear),
                Up(w[3], w[2] // factor, bilinear),
                Up(w[2], w[1] // factor, bilinear),
                Up(w[1], w[0], bilinear),
            ]
        )
        self.outc = nn.Conv2d(w[0], n_classes, kernel_size=1)

    def forward(self, x: Tensor) -> Tensor:
        skips = [self.inc(x)]
        for down in self.downs:
            skips.append(down(skips[-1]))
        x = skips.pop()
        for up in self.ups:
            x = up(x, skips.pop())
        return self.outc(x)
