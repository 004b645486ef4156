"""Whether a checkpoint (a single file or a sharded directory) is damaged: the verdict that
``ckpt_path='last'``, the elastic resume and ``python -m trainer.checkpoint verify`` act on."""

from __future__ import annotations

from pathlib import Path

from trainer.checkpoint.shard_digests import damaged_shards
from trainer.checkpoint.verify import damaged_records, describe


def damage(path: Path) -> str | None:
    """Why the checkpoint at ``path`` (a file or a sharded directory) is damaged, or None if it is intact."""
    if path.is_dir():
        meta = path / "meta.pt"
        problems = damaged_shards(path) + ([f"meta.pt: {why}"] if meta.is_file() and (why := damage(meta)) else [])
        return "; ".join(problems[:3]) or None
    bad, unreadable = damaged_records(path)
    if unreadable or bad is None:
        return unreadable or "not a torch.save zip file, so nothing vouches for its bytes"
    return f"{len(bad)} record(s) do not match their digest: {describe(bad)}" if bad else None
