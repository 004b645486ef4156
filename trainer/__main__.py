"""``python -m trainer fit --model pkg.mod.Model --data pkg.mod.Data ...``: the CLI in subclass mode."""

from trainer.cli import main

if __name__ == "__main__":
    main()
