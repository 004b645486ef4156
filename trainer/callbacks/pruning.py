"""``ModelPruning``: prune weights during training with ``torch.nn.utils.prune``, with Lightning's options.

Pruning runs at the end of each training epoch (or validation epoch, ``prune_on_train_epoch_end=False``), so
nothing is added per step. Pruned tensors are kept as ``<name>_orig`` and ``<name>_mask`` (PyTorch's
reparametrisation) while training; with ``make_pruning_permanent`` a checkpoint holds the pruned weight under
its plain name, and training's end removes the reparametrisation.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from copy import deepcopy
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.utils.prune as torch_prune
from torch import Tensor, nn

from trainer.callbacks.base import Callback
from trainer.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer

log = logging.getLogger(__name__)

_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "ln_structured": torch_prune.ln_structured,
    "l1_unstructured": torch_prune.l1_unstructured,
    "random_structured": torch_prune.random_structured,
    "random_unstructured": torch_prune.random_unstructured,
}
_METHODS: dict[str, type[torch_prune.BasePruningMethod]] = {
    "ln_structured": torch_prune.LnStructured,
    "l1_unstructured": torch_prune.L1Unstructured,
    "random_structured": torch_prune.RandomStructured,
    "random_unstructured": torch_prune.RandomUnstructured,
}
_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)

ParamList = Sequence[tuple[nn.Module, str]]
Amount = int | float | Callable[[int], int | float]
EpochFlag = bool | Callable[[int], bool]


def _is_method(fn: Any) -> bool:
    return inspect.isclass(fn) and issubclass(fn, torch_prune.BasePruningMethod)


def _per_epoch(value: Any, epoch: int) -> Any:
    return value(epoch) if callable(value) else value


class ModelPruning(Callback):
    """Prune ``parameters_to_prune`` ((module, name) pairs; empty: every weight and bias of the module) by
    ``amount`` (a fraction, a count, or a function of the epoch) each epoch ``apply_pruning`` allows.

    ``pruning_fn`` is one of PyTorch's names ("l1_unstructured", "random_unstructured", "ln_structured" with
    ``pruning_dim`` and ``pruning_norm``, "random_structured" with ``pruning_dim``) or a ``BasePruningMethod``
    class (with ``use_global_unstructured``). ``use_lottery_ticket_hypothesis`` resets the unpruned weights to
    their values at setup (or new random ones, ``resample_parameters``). ``verbose`` 1 logs the overall
    sparsity, 2 also each layer's. Override ``filter_parameters_to_prune`` to choose layers in code.
    """

    PARAMETER_NAMES = ("weight", "bias")
    _is_pruning_method = staticmethod(_is_method)  # Lightning's spelling, which its users' tests call

    def __init__(
        self,
        pruning_fn: Callable | str,
        parameters_to_prune: ParamList = (),
        parameter_names: list[str] | None = None,
        use_global_unstructured: bool = True,
        amount: Amount = 0.5,
        apply_pruning: EpochFlag = True,
        make_pruning_permanent: bool = True,
        use_lottery_ticket_hypothesis: EpochFlag = True,
        resample_parameters: bool = False,
        pruning_dim: int | None = None,
        pruning_norm: int | None = None,
        verbose: int = 0,
        prune_on_train_epoch_end: bool = True,
    ) -> None:
        self._parameter_names = parameter_names or self.PARAMETER_NAMES
        for name in self._parameter_names:
            if name not in self.PARAMETER_NAMES:
                raise MisconfigurationException(
                    f"The provided `parameter_names` name: {name} isn't in {self.PARAMETER_NAMES}"
                )
        if not (isinstance(amount, (int, float)) or callable(amount)):
            raise MisconfigurationException(
                "`amount` should be provided and be either an int, a float or Callable function."
            )
        if verbose not in (0, 1, 2):
            raise MisconfigurationException(f"`verbose` must be any of (0, 1, 2); got {verbose!r}")
        self._use_global_unstructured = use_global_unstructured
        self._global_kwargs: dict[str, Any] = {}
        self._pruning_method_name: str | None = None
        self.pruning_fn = self._resolve_fn(pruning_fn, pruning_dim, pruning_norm)
        if use_global_unstructured and getattr(self.pruning_fn, "PRUNING_TYPE", None) != "unstructured":
            raise MisconfigurationException(
                'Only the "unstructured" PRUNING_TYPE is supported with `use_global_unstructured=True`.'
                f" Found method {self.pruning_fn} of type {getattr(self.pruning_fn, 'PRUNING_TYPE', None)}. "
            )
        self._parameters_to_prune: ParamList = parameters_to_prune
        self.amount = amount
        self._apply_pruning = apply_pruning
        self._make_pruning_permanent = make_pruning_permanent
        self._use_lottery_ticket_hypothesis = use_lottery_ticket_hypothesis
        self._resample_parameters = resample_parameters
        self._verbose = verbose
        self._prune_on_train_epoch_end = prune_on_train_epoch_end
        # id(layer) -> {"data": its copy at setup, "names": [(index in parameters_to_prune, name)]}, as Lightning
        self._original_layers: dict[int, dict[str, Any]] | None = None
        self._global_zero = True  # logs on global rank zero only (set at setup)

    def _resolve_fn(self, pruning_fn: Any, dim: int | None, norm: int | None) -> Any:
        if isinstance(pruning_fn, str):
            name = pruning_fn.lower()
            if name not in _FUNCTIONS:
                raise MisconfigurationException(
                    f"The provided `pruning_fn` {name} isn't available in PyTorch's"
                    f" built-in functions: {list(_FUNCTIONS)} "
                )
            kwargs: dict[str, Any] = {}
            if name.endswith("_structured"):
                if dim is None:
                    raise MisconfigurationException(
                        "When requesting `structured` pruning, the `pruning_dim` should be provided."
                    )
                if name == "ln_structured":
                    if norm is None:
                        raise MisconfigurationException(
                            "When requesting `ln_structured` pruning, the `pruning_norm` should be provided."
                        )
                    kwargs["n"] = norm
                kwargs["dim"] = dim
            return self._create_pruning_fn(name, **kwargs)
        if _is_method(pruning_fn):
            if not self._use_global_unstructured:
                raise MisconfigurationException(
                    "PyTorch `BasePruningMethod` is currently only supported with `use_global_unstructured=True`."
                )
            return pruning_fn
        raise MisconfigurationException(
            f"`pruning_fn` is expected to be a str in {list(_FUNCTIONS)}"
            f" or a PyTorch `BasePruningMethod`. Found: {pruning_fn}."
            " HINT: if passing a `BasePruningMethod`, pass the class, not an instance"
        )

    def _create_pruning_fn(self, pruning_fn: str, **kwargs: Any) -> Callable | type[torch_prune.BasePruningMethod]:
        """The method class for global pruning (its kwargs kept for each call), else the function with them bound."""
        if self._use_global_unstructured:
            self._global_kwargs = kwargs
            self._pruning_method_name = _METHODS[pruning_fn].__name__
            return _METHODS[pruning_fn]
        self._pruning_method_name = _FUNCTIONS[pruning_fn].__name__
        return partial(_FUNCTIONS[pruning_fn], **kwargs)

    def filter_parameters_to_prune(self, parameters_to_prune: ParamList = ()) -> ParamList:
        """Override to choose which (module, name) pairs are pruned."""
        return parameters_to_prune

    # ---- pruning ------------------------------------------------------------------------------------------
    def make_pruning_permanent(self, module: nn.Module) -> None:
        """Remove the pruning reparametrisation: each pruned tensor becomes a plain parameter again."""
        for _, sub in module.named_modules():
            for key in list(sub._forward_pre_hooks):
                hook = sub._forward_pre_hooks[key]
                if isinstance(hook, torch_prune.BasePruningMethod):
                    hook.remove(sub)
                    del sub._forward_pre_hooks[key]

    @staticmethod
    def _copy_param(new: nn.Module, old: nn.Module, name: str) -> None:
        dst = getattr(new, name + "_orig") if hasattr(new, name + "_orig") else getattr(new, name)
        src = getattr(old, name)
        if isinstance(dst, Tensor) and isinstance(src, Tensor):
            dst.data = src.data.to(dst.device)

    def apply_lottery_ticket_hypothesis(self) -> None:
        """Reset the weights that survive pruning to their values at setup (or resample them): the winning ticket."""
        assert self._original_layers is not None
        for entry in self._original_layers.values():
            original, names = entry["data"], entry["names"]
            source = original
            if self._resample_parameters and callable(getattr(original, "reset_parameters", None)):
                source = deepcopy(original)  # keep the setup values for the next call
                source.reset_parameters()  # type: ignore[operator]
            for i, name in names:
                self._copy_param(self._parameters_to_prune[i][0], source, name)

    def _global_call_kwargs(self, amount: int | float) -> dict[str, Any]:
        self._global_kwargs["amount"] = amount
        accepted = set(inspect.signature(self.pruning_fn).parameters) - {"self"}
        return {k: v for k, v in self._global_kwargs.items() if k in accepted}

    @staticmethod
    def _get_pruned_stats(module: nn.Module, name: str) -> tuple[int, int]:
        mask = getattr(module, f"{name}_mask", None)
        return (0, 1) if mask is None else (int((mask == 0).sum().item()), mask.numel())

    def apply_pruning(self, amount: int | float) -> None:
        """Prune ``parameters_to_prune`` by ``amount`` once."""
        before = [self._get_pruned_stats(m, n) for m, n in self._parameters_to_prune] if self._verbose else []
        if self._use_global_unstructured:
            torch_prune.global_unstructured(
                self._parameters_to_prune, pruning_method=self.pruning_fn, **self._global_call_kwargs(amount)
            )
        else:
            for module, name in self._parameters_to_prune:
                self.pruning_fn(module, name=name, amount=amount)
        if self._verbose:
            after = [self._get_pruned_stats(m, n) for m, n in self._parameters_to_prune]
            self._log_sparsity_stats(before, after, amount=amount)

    def _log_sparsity_stats(
        self, prev: list[tuple[int, int]], curr: list[tuple[int, int]], amount: int | float = 0
    ) -> None:
        if not self._global_zero:
            return
        total = sum(size for _, size in curr)
        was, now = sum(z for z, _ in prev), sum(z for z, _ in curr)
        log.info(
            f"Applied `{self._pruning_method_name}`. Pruned:"
            f" {was}/{total} ({was / total:.2%}) -> {now}/{total} ({now / total:.2%})"
        )
        if self._verbose == 2:
            for (module, name), (pz, ps), (cz, cs) in zip(self._parameters_to_prune, prev, curr):
                log.info(
                    f"Applied `{self._pruning_method_name}` to `{module!r}.{name}` with amount={amount}. Pruned:"
                    f" {pz} ({pz / ps:.2%}) -> {cz} ({cz / cs:.2%})"
                )

    def _run_pruning(self, epoch: int) -> None:
        amount = _per_epoch(self.amount, epoch)
        if not _per_epoch(self._apply_pruning, epoch) or not amount:
            return
        # validation runs under inference mode: masks made there could not take part in training's backward
        with torch.inference_mode(False):
            self.apply_pruning(amount)
            if _per_epoch(self._use_lottery_ticket_hypothesis, epoch):
                self.apply_lottery_ticket_hypothesis()

    # ---- hooks --------------------------------------------------------------------------------------------
    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        self._global_zero = trainer.is_global_zero
        chosen = self.sanitize_parameters_to_prune(pl_module, self._parameters_to_prune, self._parameter_names)
        self._parameters_to_prune = self.filter_parameters_to_prune(chosen)
        if self._use_lottery_ticket_hypothesis:
            # one copy of each layer's setup values, with the indices of its pruned names
            self._original_layers = {}
            for i, (module, name) in enumerate(self._parameters_to_prune):
                entry = self._original_layers.setdefault(id(module), {"data": deepcopy(module), "names": []})
                entry["names"].append((i, name))

    def on_train_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        if self._prune_on_train_epoch_end:
            self._run_pruning(pl_module.current_epoch)

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: Module) -> None:
        if not trainer.sanity_checking and not self._prune_on_train_epoch_end:
            self._run_pruning(pl_module.current_epoch)

    def on_train_end(self, trainer: Trainer, pl_module: Module) -> None:
        if self._make_pruning_permanent:
            self.make_pruning_permanent(pl_module)

    def on_save_checkpoint(self, trainer: Trainer, pl_module: Module, checkpoint: dict[str, Any]) -> None:
        if self._make_pruning_permanent:  # the pruned weights under their plain names; training keeps its masks
            checkpoint["state_dict"] = _permanent_state_dict(pl_module)

    @staticmethod
    def sanitize_parameters_to_prune(
        pl_module: nn.Module, parameters_to_prune: ParamList = (), parameter_names: Sequence[str] = ()
    ) -> ParamList:
        """Every (layer, name) of ``parameter_names`` when ``parameters_to_prune`` is empty; else check that each
        pair is a layer of the module that has that name."""
        from trainer.module import Module

        names = parameter_names or ModelPruning.PARAMETER_NAMES
        layers = [m for m in pl_module.modules() if not isinstance(m, (Module, *_CONTAINERS))]
        if not parameters_to_prune:
            return [(m, p) for p in names for m in layers if isinstance(getattr(m, p, None), nn.Parameter)]
        if not (
            isinstance(parameters_to_prune, (list, tuple))
            and all(len(p) == 2 for p in parameters_to_prune)
            and all(isinstance(a, nn.Module) and isinstance(b, str) for a, b in parameters_to_prune)
        ):
            raise MisconfigurationException(
                "The provided `parameters_to_prune` should either be list of tuple"
                " with 2 elements: (nn.Module, parameter_name_to_prune) or None"
            )
        missing_modules = [m for m, _ in parameters_to_prune if m not in layers]
        missing_parameters = [n for m, n in parameters_to_prune if m in layers and not hasattr(m, n)]
        if missing_modules or missing_parameters:
            raise MisconfigurationException(
                "Some provided `parameters_to_prune` don't exist in the model."
                f" Found missing modules: {missing_modules} and missing parameters: {missing_parameters}"
            )
        return parameters_to_prune


def _permanent_state_dict(module: nn.Module) -> dict[str, Any]:
    """The module's state with each ``<name>_orig``/``<name>_mask`` pair folded into ``<name>``, on the CPU."""
    state = module.state_dict()
    for key in [k[: -len("_mask")] for k in state if k.endswith("_mask")]:
        orig, mask = state.pop(key + "_orig"), state.pop(key + "_mask")
        state[key] = mask.to(dtype=orig.dtype) * orig
    return {k: v.cpu() if isinstance(v, Tensor) else v for k, v in state.items()}
