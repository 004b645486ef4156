"""What last.ckpt's own copy costs (issue 36): a checkpoint save of the UNet recipe's state (model and Adam,
written atomically as the Trainer writes it) against the same save followed by ``clone_file`` to last.ckpt,
in interleaved rounds; prints the median ratio of (save + copy) to save alone."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from recipes.unet_carvana import UNetSegmentation
from trainer.checkpoint.io import clone_file, save_checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    module = UNetSegmentation()
    optimizer = torch.optim.Adam(module.parameters())
    for p in module.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    state = {"state_dict": module.state_dict(), "optimizer_states": [optimizer.state_dict()]}
    with tempfile.TemporaryDirectory() as folder:
        path, last = Path(folder, "epoch=0-step=1.ckpt"), Path(folder, "last.ckpt")
        temporary = Path(folder, ".last.ckpt.tmp")
        save_s, copy_s, ratios = [], [], []
        for _ in range(args.rounds):
            start = time.perf_counter()
            save_checkpoint(state, path)
            saved = time.perf_counter()
            clone_file(path, temporary)  # a copy (or reflink) into a temporary, renamed over last.ckpt
            os.replace(temporary, last)
            copied = time.perf_counter()
            save_s.append(saved - start)
            copy_s.append(copied - saved)
            ratios.append((copied - start) / (saved - start))
        size = path.stat().st_size / 2**20
    print(
        f"UNet checkpoint {size:.1f} MiB: save {statistics.median(save_s) * 1e3:.0f} ms, last.ckpt copy "
        f"{statistics.median(copy_s) * 1e3:.0f} ms (medians of {args.rounds}); (save + copy) / save: median ratio "
        f"{statistics.median(ratios):.2f}"
    )


if __name__ == "__main__":
    main()
