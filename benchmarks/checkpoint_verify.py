"""What verifying a checkpoint costs: load time of a ~500 MB checkpoint with and without the check.

Rounds alternate the order of the two loads (page cache warm after a first untimed load of each);
the figure is the median of the per-round ratios. Also the digest's own throughput (MB/s).

    PYTHONPATH=$PWD python benchmarks/checkpoint_verify.py [--mb 500] [--rounds 9]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import zlib
from pathlib import Path

import torch

from trainer.checkpoint.io import save_checkpoint
from trainer.checkpoint.verify import load_verified, sum64


def _timed(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    torch.set_num_threads(1)
    tensors = {f"layer{i}.weight": torch.randn(4 << 20) for i in range(args.mb // 16)}  # 16 MiB each
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "big.ckpt"
        save_checkpoint({"state_dict": tensors}, path)
        size_mb = path.stat().st_size / 1e6
        plain = lambda: torch.load(path, map_location="cpu", weights_only=True)  # noqa: E731
        verified = lambda: load_verified(path, "cpu")  # noqa: E731
        plain(), verified()  # warm the page cache
        ratios, times = [], {"plain": [], "verified": []}
        for r in range(args.rounds):
            order = [("plain", plain), ("verified", verified)][:: 1 if r % 2 == 0 else -1]
            got = {name: _timed(fn) for name, fn in order}
            for name, seconds in got.items():
                times[name].append(seconds)
            ratios.append(got["verified"] / got["plain"])
        data = path.read_bytes()
        digest_s = min(_timed(lambda: sum64(data)) for _ in range(3))
        crc_s = min(_timed(lambda: zlib.crc32(data)) for _ in range(3))
    print(f"checkpoint {size_mb:.0f} MB, {args.rounds} rounds (alternating order), torch {torch.__version__}")
    for name, values in times.items():
        print(f"  load {name:9s} median {statistics.median(values):.3f} s")
    ratio = statistics.median(ratios)
    print(f"  verified / plain: median of per-round ratios {ratio:.3f} (+{(ratio - 1) * 100:.0f}%)")
    print(f"  sum64 digest throughput: {size_mb / digest_s:.0f} MB/s (one core, file bytes in memory)")
    print(f"  zlib CRC-32 throughput:  {size_mb / crc_s:.0f} MB/s (what files written elsewhere are checked with)")


if __name__ == "__main__":
    main()
