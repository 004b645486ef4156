"""``cli_lightning_logo()``: what Lightning's example scripts call before their CLI, so a port runs as is."""

from __future__ import annotations

LOGO = r"""
     _                 _       _             _
 ___| |_ ___  __ _  __| |_   _| |_ _ __ __ _(_)_ __
/ __| __/ _ \/ _` |/ _` | | | | __| '__/ _` | | '_ \
\__ \ ||  __/ (_| | (_| | |_| | |_| | | (_| | | | | |
|___/\__\___|\__,_|\__,_|\__, |\__|_|  \__,_|_|_| |_|
                         |___/
"""


def cli_lightning_logo() -> None:
    """Print steadytrain's banner, framed as Lightning frames its logo (a blank line, the banner in magenta,
    a blank line), so a ported script's output keeps its shape."""
    print()
    print("\033[0;35m" + LOGO + "\033[0m")
    print()
