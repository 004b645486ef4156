"""``Trainer.validate``, ``test`` and ``predict``: set up, load weights if asked, run the loop once."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer.exceptions import MisconfigurationAttributeError, MisconfigurationException, MisconfigurationTypeError
from trainer.loops.checks import check_module
from trainer.loops.evaluation import EvalStage, EvaluationLoop
from trainer.loops.hparams_log import log_hyperparams
from trainer.loops.lifecycle import STAGE_NAMES, running

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView


def evaluate(
    trainer: TrainerView,
    stage: EvalStage,
    model: Module | None,
    dataloaders: Any,
    ckpt_path: Any,
    verbose: bool,
    datamodule: Any,
) -> list[dict[str, float]]:
    """Every sample once across ranks; returns each loader's epoch metrics."""
    loop: EvaluationLoop = trainer.validate_loop if stage == "validation" else trainer.test_loop
    results = _run_evaluation(trainer, stage, loop, model, dataloaders, ckpt_path, datamodule, keep=False)
    if verbose and trainer.is_global_zero and results:
        print(_table(STAGE_NAMES[stage], results), flush=True)
    return results


def predict(
    trainer: TrainerView,
    model: Module | None,
    dataloaders: Any,
    datamodule: Any,
    return_predictions: bool | None,
    ckpt_path: Any,
) -> list[Any] | None:
    """This rank's ``predict_step`` outputs in order; one list per loader when there are several."""
    keep = True if return_predictions is None else return_predictions
    loop = trainer.predict_loop
    _run_evaluation(trainer, "predict", loop, model, dataloaders, ckpt_path, datamodule, keep=keep)
    if not keep:
        return None
    return loop.predictions[0] if len(loop.predictions) == 1 else loop.predictions


def _run_evaluation(
    trainer: TrainerView,
    stage: EvalStage,
    loop: EvaluationLoop,
    model: Module | None,
    dataloaders: Any,
    ckpt_path: Any,
    datamodule: Any,
    keep: bool,
) -> list[dict[str, float]]:
    from trainer.data.resolve import is_datamodule, resolve_loaders

    fn = STAGE_NAMES[stage]
    if trainer.state.running_now:
        raise RuntimeError(
            f"Trainer.{fn}() was called while Trainer.{trainer.state.fn}() runs (from a hook or step?). To "
            "validate during training use Trainer(val_check_interval=...); otherwise call it after fit returns."
        )
    module = model if model is not None else trainer.module
    if module is None:
        raise MisconfigurationTypeError(
            f"`Trainer.{fn}()` requires a `LightningModule` when it hasn't been passed in a previous run: pass one, "
            "or call it after fit(model)."
        )
    check_module(module, fn)
    step = {"validation": "validation_step", "test": "test_step", "predict": "predict_step"}[stage]
    _check_step(module, step, fn)
    if is_datamodule(dataloaders):
        datamodule, dataloaders = dataloaders, None
    ckpt_path = trainer.state.checkpoint_for(fn, ckpt_path)
    if model is None and ckpt_path is None:
        ckpt_path = _best_of_previous_fit(trainer, fn)
    with running(trainer, module, fn, datamodule):
        module.configure_model()
        module.zero_grad()  # Lightning's, as each stage starts
        if stage != "predict" and trainer.limits[stage] == 0:
            return []  # Lightning's: no loaders asked for, no hooks, no results
        strategy = trainer.strategy
        loaders = resolve_loaders(strategy, trainer.use_distributed_sampler, module, stage, dataloaders, datamodule)
        if not loaders:
            return []  # an empty list of loaders: nothing to run, as in Lightning
        on_meta = strategy.loads_weights_after_setup(module)  # built on the meta device: no memory before setup
        if not on_meta:
            _load_weights(trainer, ckpt_path, fn)
        trainer.precision_plugin.convert_module(module)
        strategy.setup_module(module)
        if on_meta:
            _load_weights(trainer, ckpt_path, fn)
        log_hyperparams(trainer, module, datamodule)
        loop.setup(loaders, trainer.limits[stage])
        return loop.run(keep_predictions=keep)


def _best_of_previous_fit(trainer: TrainerView, fn: str) -> str | None:
    """Lightning's rule for a stage called with neither a model nor ``ckpt_path``: the best checkpoint of
    the previous fit, with its warning. Where fit saved none (no ModelCheckpoint, fast_dev_run), the
    weights as they are (Lightning raises there)."""
    callback = trainer.checkpoint_callback
    best = getattr(callback, "best_model_path", "") if callback is not None else ""
    if not best:
        return None
    if trainer.is_global_zero:
        warnings.warn(
            f"`.{fn}(ckpt_path=None)` was called without a model. The best model of the previous `fit` call will be "
            f"used ({best}). You can pass `.{fn}(ckpt_path='best')` to use the best model or `.{fn}(ckpt_path='last')` "
            "to use the last model, or pass the model to use its weights as they are. If you pass a value, this "
            "warning will be silenced.",
            stacklevel=5,  # the user's call of validate/test/predict
        )
    return "best"


def _load_weights(trainer: TrainerView, ckpt_path: Any, fn: str) -> None:
    """``ckpt_path``: a file, "last" (newest checkpoint), "best" (the ModelCheckpoint's best), or None."""
    from trainer.checkpoint.restore import Phase
    from trainer.checkpoint.state import open_checkpoint, resolve_checkpoint_path

    if ckpt_path is None:
        return
    if str(ckpt_path) == "best":
        callback = trainer.checkpoint_callback
        if callback is None:
            raise MisconfigurationException(
                f'`.{fn}(ckpt_path="best")` is set but `ModelCheckpoint` is not configured: fit with checkpointing on '
                "(enable_checkpointing=True, or a ModelCheckpoint in callbacks), or pass a path."
            )
        best = callback.best_model_path
        if not best:
            raise MisconfigurationException(
                f'`.{fn}(ckpt_path="best")` is set but `ModelCheckpoint` is not configured to save the best model: '
                "fit with a ModelCheckpoint first (save_top_k other than 0), or pass a path."
            )
        path: Path | None = Path(best)
    else:
        path = resolve_checkpoint_path(trainer, ckpt_path)
    if path is not None:
        trainer.state.loaded(path)
        open_checkpoint(trainer, path, fitting=False).load(Phase.MODULE)


def _table(fn: str, results: list[dict[str, float]]) -> str:
    """Lightning's results table, in plain text: one column per loader."""
    names = sorted({k for r in results for k in r})
    if not names:
        return f"{fn.capitalize()}: nothing was logged."
    head = [f"{fn.capitalize()} metric"] + [f"DataLoader {i}" for i in range(len(results))]
    rows = [[name] + [f"{r[name]:.6g}" if name in r else "" for r in results] for name in names]
    widths = [max(len(row[c]) for row in [head, *rows]) for c in range(len(head))]
    rule = "-" * (sum(widths) + 3 * (len(widths) - 1))
    lines = [rule, "   ".join(h.ljust(w) for h, w in zip(head, widths)), rule]
    lines += ["   ".join(v.ljust(w) for v, w in zip(row, widths)) for row in rows]
    return "\n".join([*lines, rule])


def _check_step(module: Module, step: str, fn: str) -> None:
    """The step a stage runs exists, in Lightning's words; predict's default step runs ``forward``."""
    from trainer.module import written

    name = type(module).__name__
    if step != "predict_step" and not written(module, step):
        raise MisconfigurationAttributeError(
            f"No `{step}()` method defined to run `Trainer.{fn}`: {name} has no {step}(); define it to run {fn}."
        )
    if step == "predict_step" and getattr(module, step, None) is None:
        raise MisconfigurationAttributeError(f"`predict_step` cannot be None: define {name}.predict_step to predict.")
    if step == "predict_step" and not written(module, step) and getattr(module, "forward", None) is None:
        raise MisconfigurationAttributeError(
            f"`{name}.predict_step` requires `forward` method to run: define forward() or predict_step()."
        )
