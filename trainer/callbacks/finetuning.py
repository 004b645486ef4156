"""``BaseFinetuning`` and ``BackboneFinetuning``: freeze layers before training, unfreeze them later into
new optimizer parameter groups (Lightning's API).

A checkpoint records the parameter groups the callback added, which parameters train and which
BatchNorm layers track statistics; a resumed run puts them back when fit starts, so the optimizer's
saved state (one entry per group) fits again and training continues exactly.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeAlias

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from trainer.callbacks.base import Callback

if TYPE_CHECKING:
    from trainer.module import Module
    from trainer.view import TrainerView as Trainer

Modules: TypeAlias = nn.Module | Iterable[Any]  # a module, or an iterable of modules (nested)


def multiplicative(epoch: int) -> float:
    """``BackboneFinetuning``'s default: double the backbone's learning rate every epoch."""
    return 2.0


class BaseFinetuning(Callback):
    """Override ``freeze_before_training`` (runs in ``setup``, before ``configure_optimizers``) and
    ``finetune_function`` (runs at every training epoch start, for each optimizer).

    Build the optimizer from trainable parameters only, e.g.
    ``Adam(filter(lambda p: p.requires_grad, self.parameters()))``, and add unfrozen layers with
    ``unfreeze_and_add_param_group``.
    """

    def __init__(self) -> None:
        self._internal_optimizer_metadata: dict[int, list[dict[str, Any]]] = {}
        self._restarting = False
        self._trainable: dict[str, bool] = {}  # parameter name -> requires_grad, as saved
        self._tracking: dict[str, bool] = {}  # BatchNorm layer name -> track_running_stats, as saved

    # ---- what subclasses define ---------------------------------------------------------------------
    def freeze_before_training(self, pl_module: Module) -> None:
        """Override: freeze what must not train at first (``self.freeze(pl_module.backbone)``)."""
        raise NotImplementedError(f"{type(self).__name__} must define freeze_before_training(pl_module).")

    def finetune_function(self, pl_module: Module, current_epoch: int, optimizer: torch.optim.Optimizer) -> None:
        """Override: unfreeze at the epoch you choose (``self.unfreeze_and_add_param_group(...)``)."""
        raise NotImplementedError(f"{type(self).__name__} must define finetune_function(pl_module, epoch, optimizer).")

    # ---- the tools ----------------------------------------------------------------------------------
    @staticmethod
    def flatten_modules(modules: Modules) -> list[nn.Module]:
        """The leaf layers of a module or (nested) iterable of modules, and the parents that hold parameters."""
        if isinstance(modules, nn.ModuleDict):
            modules = modules.values()
        if isinstance(modules, nn.Module):
            found: Iterable[nn.Module] = modules.modules()
        else:
            found = [leaf for m in modules for leaf in BaseFinetuning.flatten_modules(m)]
        return [m for m in found if not list(m.children()) or m._parameters]

    @staticmethod
    def filter_params(modules: Modules, train_bn: bool = True, requires_grad: bool = True) -> Iterator[nn.Parameter]:
        """The parameters of ``modules`` whose ``requires_grad`` is ``requires_grad``; BatchNorm's only with
        ``train_bn``."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and not train_bn:
                continue
            for param in module.parameters(recurse=False):  # a parent's own only: no parameter twice
                if param.requires_grad == requires_grad:
                    yield param

    @staticmethod
    def make_trainable(modules: Modules) -> None:
        """Unfreeze: every parameter trains, BatchNorm layers track statistics again."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm):
                module.track_running_stats = True
            for param in module.parameters(recurse=False):
                param.requires_grad = True

    @staticmethod
    def freeze_module(module: nn.Module) -> None:
        """Freeze one layer's own parameters (a BatchNorm layer also stops tracking statistics)."""
        if isinstance(module, _BatchNorm):
            module.track_running_stats = False
        for param in module.parameters(recurse=False):
            param.requires_grad = False

    @staticmethod
    def freeze(modules: Modules, train_bn: bool = True) -> None:
        """Freeze ``modules``; with ``train_bn`` their BatchNorm layers keep training."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and train_bn:
                BaseFinetuning.make_trainable(module)
            else:
                BaseFinetuning.freeze_module(module)

    @staticmethod
    def filter_on_optimizer(optimizer: torch.optim.Optimizer, params: Iterable[nn.Parameter]) -> list[nn.Parameter]:
        """``params`` that are in none of ``optimizer``'s groups (a parameter may be in only one).

        Lightning compares values here, so two equal-valued parameters (zero-initialised biases) count
        as one; this compares identity.
        """
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        params = list(params)
        kept = [p for p in params if id(p) not in held]
        if len(kept) < len(params):
            warnings.warn(
                f"The provided params to be frozen already exist within another group of this optimizer: "
                f"{len(params) - len(kept)} parameter(s) are skipped. HINT: Did you init your optimizer in "
                f"`configure_optimizer` as such: {type(optimizer).__name__}(filter(lambda p: p.requires_grad, "
                "self.parameters()), ...)",
                stacklevel=2,
            )
        return kept

    @staticmethod
    def unfreeze_and_add_param_group(
        modules: Modules,
        optimizer: torch.optim.Optimizer,
        lr: float | None = None,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
    ) -> None:
        """Unfreeze ``modules`` and add their parameters to ``optimizer`` as one new group.

        Its learning rate is ``lr``, or the first group's divided by ``initial_denom_lr``.
        """
        BaseFinetuning.make_trainable(modules)
        group_lr = optimizer.param_groups[0]["lr"] / initial_denom_lr if lr is None else float(lr)
        params = BaseFinetuning.filter_params(modules, train_bn=train_bn, requires_grad=True)
        new = BaseFinetuning.filter_on_optimizer(optimizer, params)
        if new:
            optimizer.add_param_group({"params": new, "lr": group_lr})

    # ---- hooks --------------------------------------------------------------------------------------
    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        self.freeze_before_training(pl_module)
        self._remember_trainable(pl_module)

    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None:
        """A resumed run gets back the groups added before the checkpoint, and which layers train."""
        if not self._restarting:
            return
        self._restarting = False
        named = dict(pl_module.named_parameters())
        for opt_idx, optimizer in enumerate(trainer.optimizers):
            if opt_idx in self._internal_optimizer_metadata:
                optimizer.param_groups = _map_params(self._internal_optimizer_metadata[opt_idx], named.__getitem__)
        for name, param in named.items():
            param.requires_grad = self._trainable.get(name, param.requires_grad)
        for name, module in pl_module.named_modules():
            if isinstance(module, _BatchNorm) and name in self._tracking:
                module.track_running_stats = self._tracking[name]

    def on_train_epoch_start(self, trainer: Trainer, pl_module: Module) -> None:
        for opt_idx, optimizer in enumerate(trainer.optimizers):
            before = len(optimizer.param_groups)
            self.finetune_function(pl_module, trainer.current_epoch, optimizer)
            self._store(pl_module, opt_idx, before, optimizer.param_groups)
        self._remember_trainable(pl_module)

    def _store(self, pl_module: Module, opt_idx: int, before: int, groups: list[dict[str, Any]]) -> None:
        """Remember the optimizer's groups by parameter name: all of them once, then each one added."""
        names = {id(p): n for n, p in pl_module.named_parameters()}
        known = self._internal_optimizer_metadata
        if opt_idx not in known:
            known[opt_idx] = _map_params(groups, lambda p: names[id(p)])
        elif len(groups) != before:
            known[opt_idx].extend(_map_params(groups[before:], lambda p: names[id(p)]))

    def _remember_trainable(self, pl_module: Module) -> None:
        """Which parameters train and which BatchNorm layers track statistics, after each change this
        callback makes: a resumed run's ``freeze_before_training`` cannot know what was unfrozen since."""
        self._trainable = {n: p.requires_grad for n, p in pl_module.named_parameters()}
        self._tracking = {n: m.track_running_stats for n, m in pl_module.named_modules() if isinstance(m, _BatchNorm)}

    # ---- checkpoints --------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "internal_optimizer_metadata": self._internal_optimizer_metadata,
            "trainable": dict(self._trainable),
            "tracking": dict(self._tracking),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restarting = True
        self._internal_optimizer_metadata = state_dict["internal_optimizer_metadata"]
        self._trainable = dict(state_dict.get("trainable", {}))
        self._tracking = dict(state_dict.get("tracking", {}))


def _map_params(groups: list[dict[str, Any]], convert: Callable[[Any], Any]) -> list[dict[str, Any]]:
    """Copies of parameter groups with ``convert`` applied to each parameter (to its name for a checkpoint,
    which holds no Parameter, and back)."""
    return [
        {**{k: v for k, v in g.items() if k != "params"}, "params": [convert(p) for p in g["params"]]} for g in groups
    ]


class BackboneFinetuning(BaseFinetuning):
    """Train the head with the backbone (``pl_module.backbone``) frozen, then unfreeze the backbone at
    ``unfreeze_backbone_at_epoch`` into its own group, with a learning rate that grows each epoch.

    Its first rate is ``backbone_initial_lr``, else the head's times ``backbone_initial_ratio_lr``;
    each later epoch multiplies it by ``lambda_func(epoch + 1)``. With ``should_align`` it never
    passes the head's rate (it stays equal once it reaches it).
    """

    def __init__(
        self,
        unfreeze_backbone_at_epoch: int = 10,
        lambda_func: Callable[[int], float] = multiplicative,
        backbone_initial_ratio_lr: float = 10e-2,
        backbone_initial_lr: float | None = None,
        should_align: bool = True,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
        verbose: bool = False,
        rounding: int = 12,
    ) -> None:
        super().__init__()
        self.unfreeze_backbone_at_epoch = unfreeze_backbone_at_epoch
        self.lambda_func = lambda_func
        self.backbone_initial_ratio_lr = backbone_initial_ratio_lr
        self.backbone_initial_lr = backbone_initial_lr
        self.should_align = should_align
        self.initial_denom_lr = initial_denom_lr
        self.train_bn = train_bn
        self.verbose = verbose
        self.rounding = rounding
        self.previous_backbone_lr: float | None = None

    def setup(self, trainer: Trainer, pl_module: Module, stage: str) -> None:
        _check_backbone(pl_module)
        super().setup(trainer, pl_module, stage)

    def on_fit_start(self, trainer: Trainer, pl_module: Module) -> None:
        _check_backbone(pl_module)
        super().on_fit_start(trainer, pl_module)

    def freeze_before_training(self, pl_module: Module) -> None:
        self.freeze(pl_module.backbone)

    def finetune_function(self, pl_module: Module, current_epoch: int, optimizer: torch.optim.Optimizer) -> None:
        if current_epoch < self.unfreeze_backbone_at_epoch:
            return
        head_lr = optimizer.param_groups[0]["lr"]
        if current_epoch == self.unfreeze_backbone_at_epoch:
            backbone_lr = self.backbone_initial_lr
            if backbone_lr is None:
                backbone_lr = head_lr * self.backbone_initial_ratio_lr
            self.unfreeze_and_add_param_group(
                pl_module.backbone,
                optimizer,
                backbone_lr,
                train_bn=self.train_bn,
                initial_denom_lr=self.initial_denom_lr,
            )
        else:
            assert self.previous_backbone_lr is not None
            backbone_lr = self.lambda_func(current_epoch + 1) * self.previous_backbone_lr
            if self.should_align and backbone_lr > head_lr:
                backbone_lr = head_lr
            optimizer.param_groups[-1]["lr"] = backbone_lr
        self.previous_backbone_lr = backbone_lr
        if self.verbose and pl_module.global_rank == 0:
            rounding = self.rounding
            print(f"Current lr: {round(head_lr, rounding)}, Backbone lr: {round(backbone_lr, rounding)}", flush=True)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "previous_backbone_lr": self.previous_backbone_lr}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.previous_backbone_lr = state_dict["previous_backbone_lr"]
        super().load_state_dict(state_dict)


def _check_backbone(pl_module: Module) -> None:
    if not isinstance(getattr(pl_module, "backbone", None), nn.Module):
        raise AttributeError(
            f"BackboneFinetuning needs the module's layers to unfreeze in a `backbone` attribute (an nn.Module); "
            f"{type(pl_module).__name__} has none."
        )
