"""Checkpoint tools.

``python -m trainer.checkpoint consolidate DIR OUT.pt``: a sharded checkpoint's weights as one plain file,
the module's state_dict; ``torch.load(OUT.pt, weights_only=True)`` loads it into the bare ``nn.Module``
on one process, without torch.distributed.

``python -m trainer.checkpoint verify PATH...``: check checkpoint files, sharded checkpoint directories,
or folders of them (each checkpoint inside) against their digests; prints one verdict per checkpoint and
exits 1 if any is damaged (after copying checkpoints between machines, say). In a folder it also names
what killed saves left (empty names, temporaries): those of a gone writer are not checkpoints and count
as damage; a live writer's are a save under way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainer.checkpoint.io import CheckpointError
from trainer.checkpoint.sharded import consolidate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.checkpoint", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    merge = commands.add_parser("consolidate", help="write a sharded checkpoint's weights as one torch.save file")
    merge.add_argument("directory", help="a sharded checkpoint directory (<name>.ckpt/ with .metadata)")
    merge.add_argument("out", help="the weights file to write (e.g. model.pt)")
    check = commands.add_parser("verify", help="check checkpoints against their digests (exit 1 if any is damaged)")
    check.add_argument("paths", nargs="+", help="checkpoint files, sharded checkpoint directories, or folders of them")
    args = parser.parse_args(argv)
    if args.command == "verify":
        return verify_paths(args.paths)
    try:
        out = consolidate(args.directory, args.out)
    except (FileNotFoundError, CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"wrote the weights of {args.directory} to {out}")
    return 0


def verify_paths(paths: list[str]) -> int:
    """Print ``OK``/``DAMAGED``/``UNCHECKED`` per checkpoint; 1 if any is damaged or a path does not exist."""
    from trainer.checkpoint.damage import damage
    from trainer.checkpoint.leftovers import leftovers

    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        print(f"error: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 1
    checkpoints = [c for p in paths for c in _checkpoints(Path(p))]
    if not checkpoints and not any(leftovers(Path(p)) for p in paths if Path(p).is_dir()):
        print(
            f"error: no checkpoint (*.ckpt, *.pt, *.pth, or a sharded directory) in {', '.join(paths)}", file=sys.stderr
        )
        return 1
    left = {entry.path: entry for p in paths if Path(p).is_dir() for entry in leftovers(Path(p))}
    damaged = 0
    for path in checkpoints:
        if path in left:
            continue  # an empty name of a killed save: said below
        why = damage(path) if path.is_dir() or path.stat().st_size else "empty (0 bytes): not a checkpoint"
        damaged += why is not None
        print(f"DAMAGED  {path}: {why}" if why else f"OK       {path}", flush=True)
    for entry in left.values():
        damaged += entry.stale
        verdict = "LEFTOVER" if entry.stale else "WRITING "
        advice = ": not a checkpoint, safe to delete" if entry.stale else ""
        print(f"{verdict} {entry.path}: {entry.describe()}{advice}", flush=True)
    print(f"{len(checkpoints)} checkpoint(s) checked, {damaged} damaged or left by a killed save.")
    return 1 if damaged else 0


def _checkpoints(path: Path) -> list[Path]:
    """A file or sharded directory as given; a plain folder's checkpoint files and sharded directories."""
    from trainer.checkpoint.sharded import DCP_METADATA

    if path.is_file() or (path / DCP_METADATA).is_file():
        return [path]
    return sorted(
        p
        for p in path.iterdir()
        if not p.name.startswith(".") and (p.suffix in (".ckpt", ".pt", ".pth") or (p / DCP_METADATA).is_file())
    )


if __name__ == "__main__":
    sys.exit(main())
