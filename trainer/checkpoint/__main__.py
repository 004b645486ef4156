"""``python -m trainer.checkpoint consolidate DIR OUT.pt``: a sharded checkpoint's weights as one plain file.

The file is the module's state_dict; ``torch.load(OUT.pt, weights_only=True)`` loads it into the bare
``nn.Module`` (``module.load_state_dict``) on one process, without torch.distributed.
"""

from __future__ import annotations

import argparse
import sys

from trainer.checkpoint.io import CheckpointError
from trainer.checkpoint.sharded import consolidate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.checkpoint", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    merge = commands.add_parser("consolidate", help="write a sharded checkpoint's weights as one torch.save file")
    merge.add_argument("directory", help="a sharded checkpoint directory (<name>.ckpt/ with .metadata)")
    merge.add_argument("out", help="the weights file to write (e.g. model.pt)")
    args = parser.parse_args(argv)
    try:
        out = consolidate(args.directory, args.out)
    except (FileNotFoundError, CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"wrote the weights of {args.directory} to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
