"""Lightning's ``cli.instantiate_module``: a module rebuilt from the hyper-parameters a CLI run saved, through
jsonargparse, so nested class paths and typed arguments are built as the command line built them. It lives with the
checkpoint code that calls it (``load_from_checkpoint`` of a checkpoint naming it); ``trainer.cli`` hands it on."""

from __future__ import annotations

from typing import Any, TypeVar

from trainer.lightning_paths import port_class_paths_in

ModuleType = TypeVar("ModuleType")


def instantiate_module(class_type: type[ModuleType], config: dict[str, Any]) -> ModuleType:
    """``class_type`` (or the subclass named by ``config["_class_path"]``) built from ``config``'s arguments."""
    from jsonargparse import ArgumentParser  # only here: loading a checkpoint of a CLI run

    config = port_class_paths_in(config)  # a Lightning run's checkpoint names Lightning's classes
    parser = ArgumentParser(exit_on_error=False)
    if "_class_path" in config:
        parser.add_subclass_arguments(class_type, "module", fail_untyped=False)
        init = {k: v for k, v in config.items() if k != "_class_path"}
        config = {"class_path": config["_class_path"], "dict_kwargs": init}
    else:
        parser.add_class_arguments(class_type, "module", fail_untyped=False)
    built = parser.instantiate_classes(parser.parse_object({"module": config}))
    return built.module  # type: ignore[no-any-return]
