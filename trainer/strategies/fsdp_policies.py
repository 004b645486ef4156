"""Lightning's ``FSDPStrategy`` options (written for FSDP1) read for FSDP2 (``fully_shard``).

- ``auto_wrap_policy``: which submodules get their own ``fully_shard`` (gathered only around their own
  forward and backward). A set of module classes, a torch policy object (``ModuleWrapPolicy``,
  ``CustomPolicy``), or an FSDP1 callable ``policy(module, recurse, nonwrapped_numel) -> bool`` such as
  ``functools.partial(size_based_auto_wrap_policy, min_num_params=...)``, walked as FSDP1 walks it.
- ``activation_checkpointing_policy``: the same kinds of policy choosing the blocks whose activations are
  recomputed in backward.
- ``sharding_strategy`` and ``device_mesh``: the mesh ``fully_shard`` runs on and whether parameters stay
  gathered between forward and backward (``Layout``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal

import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from trainer.exceptions import MisconfigurationException

Policy = set[type[nn.Module]] | Callable[..., bool] | Any  # Any: torch's ``_Policy`` objects
MeshKind = Literal["shard", "hybrid", "replicate"]

# Lightning's names (torch's ``ShardingStrategy``) -> (mesh, parameters resharded after forward)
SHARDING_STRATEGIES: dict[str, tuple[MeshKind, bool]] = {
    "FULL_SHARD": ("shard", True),
    "SHARD_GRAD_OP": ("shard", False),
    "NO_SHARD": ("replicate", False),
    "HYBRID_SHARD": ("hybrid", True),
    "_HYBRID_SHARD_ZERO2": ("hybrid", False),
}


@dataclass(frozen=True)
class Layout:
    """Where ``fully_shard`` puts the parameters: a 1-D mesh over all ranks ("shard"), a 2-D (replicate, shard)
    mesh ("hybrid"), or a (world size, 1) mesh that replicates every parameter ("replicate", DDP's layout)."""

    mesh_kind: MeshKind = "shard"
    reshard_after_forward: bool = True
    mesh: tuple[int, int] | DeviceMesh | None = None  # the user's device_mesh

    def build_mesh(self, device_type: str, world_size: int, num_nodes: int) -> DeviceMesh:
        if isinstance(self.mesh, DeviceMesh):
            return self.mesh
        if self.mesh_kind == "shard":
            return init_device_mesh(device_type, (world_size,), mesh_dim_names=("shard",))
        shape = self.mesh or _default_shape(self.mesh_kind, world_size, num_nodes)
        if shape[0] * shape[1] != world_size:
            raise MisconfigurationException(
                f"FSDPStrategy(device_mesh={shape}): replicate size x shard size must equal the world size "
                f"{world_size}, e.g. device_mesh=({num_nodes}, {world_size // num_nodes})."
            )
        return init_device_mesh(device_type, shape, mesh_dim_names=("replicate", "shard"))


def _default_shape(kind: MeshKind, world_size: int, num_nodes: int) -> tuple[int, int]:
    """Hybrid: shard within a node, replicate across nodes (FSDP1's default); replicate: every rank whole."""
    return (num_nodes, world_size // num_nodes) if kind == "hybrid" else (world_size, 1)


def layout(
    sharding_strategy: Any,
    sharding: str,
    reshard_after_forward: bool | None,
    device_mesh: tuple[int, int] | DeviceMesh | None,
) -> Layout:
    """One ``Layout`` from Lightning's ``sharding_strategy``/``device_mesh`` or our ``sharding``; a value that
    contradicts another is refused rather than one of them silently winning."""
    if sharding not in ("full", "hybrid"):
        raise MisconfigurationException(f"FSDPStrategy(sharding={sharding!r}): choose 'full' or 'hybrid'.")
    if sharding_strategy is None:
        name = "HYBRID_SHARD" if sharding == "hybrid" else "FULL_SHARD"
    else:
        name = _strategy_name(sharding_strategy)
        if sharding == "hybrid" and "HYBRID" not in name:
            raise MisconfigurationException(
                f"FSDPStrategy(sharding='hybrid', sharding_strategy={sharding_strategy!r}) disagree; set one of them."
            )
    kind, reshard = SHARDING_STRATEGIES[name]
    if reshard_after_forward is not None and sharding_strategy is not None and reshard_after_forward != reshard:
        raise MisconfigurationException(
            f"FSDPStrategy(reshard_after_forward={reshard_after_forward}, sharding_strategy={name!r}) disagree: "
            f"{name} means reshard_after_forward={reshard}; set one of them."
        )
    if reshard_after_forward is not None:
        reshard = reshard_after_forward
    return Layout(kind, reshard, _checked_mesh(device_mesh, kind, name))


def _strategy_name(value: Any) -> str:
    name = value.name if isinstance(value, Enum) else value
    if isinstance(name, str) and name.upper() in SHARDING_STRATEGIES:
        return name.upper()
    raise MisconfigurationException(
        f"FSDPStrategy(sharding_strategy={value!r}): choose one of {', '.join(SHARDING_STRATEGIES)} "
        "(a string or torch.distributed.fsdp.ShardingStrategy)."
    )


def _checked_mesh(mesh: Any, kind: MeshKind, name: str) -> tuple[int, int] | DeviceMesh | None:
    """A (replicate, shard) tuple or a 2-D DeviceMesh for hybrid sharding; a 1-D DeviceMesh to shard over."""
    if mesh is None:
        return None
    if isinstance(mesh, DeviceMesh):
        if mesh.ndim != (2 if kind == "hybrid" else 1) or kind == "replicate":
            raise MisconfigurationException(
                f"FSDPStrategy(sharding_strategy={name!r}, device_mesh=<{mesh.ndim}-D DeviceMesh>): hybrid sharding "
                "takes a 2-D (replicate, shard) mesh, FULL_SHARD and SHARD_GRAD_OP a 1-D one, NO_SHARD none."
            )
        return mesh
    if not (isinstance(mesh, tuple | list) and len(mesh) == 2 and all(_positive_int(n) for n in mesh)):
        raise MisconfigurationException(
            f"FSDPStrategy(device_mesh={mesh!r}) must be a tuple (replicate size, shard size) of positive ints "
            "or a DeviceMesh."
        )
    if kind != "hybrid":
        raise MisconfigurationException(
            f"FSDPStrategy(device_mesh={tuple(mesh)}) shapes hybrid sharding: use it with "
            f"sharding_strategy='HYBRID_SHARD' or '_HYBRID_SHARD_ZERO2' (got {name!r})."
        )
    return (int(mesh[0]), int(mesh[1]))


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


# ---- which submodules ------------------------------------------------------------------------
def checked_policy(name: str, policy: Any) -> Policy | None:
    """A set (list, tuple) of module classes, a torch policy object or a callable; anything else is refused."""
    if policy is None:
        return None
    if isinstance(policy, set | frozenset | list | tuple):
        bad = [c for c in policy if not (isinstance(c, type) and issubclass(c, nn.Module))]
        if bad or not policy:
            raise MisconfigurationException(
                f"FSDPStrategy({name}={policy!r}): a set of policy classes takes nn.Module subclasses only, at least "
                f"one{f' ({bad[0]!r} is not one)' if bad else ''}."
            )
        return set(policy)
    if isinstance(policy, type) and issubclass(policy, nn.Module):
        return {policy}
    if hasattr(policy, "_run_policy") or callable(policy):
        return policy
    raise MisconfigurationException(
        f"FSDPStrategy({name}={policy!r}): give a set of nn.Module classes, a ModuleWrapPolicy/CustomPolicy, or a "
        "callable policy(module, recurse, nonwrapped_numel) -> bool."
    )


def policy_plan(root: nn.Module, policy: Policy) -> list[nn.Module]:
    """The submodules (never the root) ``policy`` picks, innermost first, as ``fully_shard`` needs them."""
    if isinstance(policy, set):
        classes = tuple(policy)
        chosen = {m for m in root.modules() if isinstance(m, classes)}
    elif hasattr(policy, "_run_policy"):
        chosen = set(policy._run_policy(root, set(), {}))
    else:
        chosen = set()
        _walk(root, policy, chosen, is_root=True)
    return [m for m in reversed(list(root.modules())) if m in chosen and m is not root]


def _walk(module: nn.Module, policy: Callable[..., bool], chosen: set[nn.Module], is_root: bool = False) -> int:
    """FSDP1's recursive wrap: descend where ``policy(recurse=True)``, then pick a module for the parameters its
    picked descendants left; returns the parameters picked at or below ``module``."""
    total = sum(p.numel() for p in module.parameters())
    if not policy(module=module, recurse=True, nonwrapped_numel=total):
        return 0
    taken = sum(_walk(child, policy, chosen) for child in module.children())
    if not is_root and policy(module=module, recurse=False, nonwrapped_numel=total - taken):
        chosen.add(module)
        return total
    return taken


def size_plan(root: nn.Module, threshold: int) -> list[nn.Module]:
    """Submodules to shard, innermost first: each with ``threshold`` parameters not taken by one inside it."""
    taken: set[int] = set()
    plan = []
    for sub in reversed(list(root.modules())):
        if sub is root:
            continue
        own = [p for p in sub.parameters() if id(p) not in taken]
        if own and sum(p.numel() for p in own) >= threshold:
            plan.append(sub)
            taken.update(id(p) for p in own)
    return plan


def activation_checkpointing(classes: Any, policy: Any) -> Policy | None:
    """Our (and Lightning's deprecated) ``activation_checkpointing`` classes, or Lightning's policy; not both."""
    given = () if classes is None else (classes,) if isinstance(classes, type) else tuple(classes)
    if given and policy is not None:
        raise MisconfigurationException(
            "You cannot set both `activation_checkpointing` and `activation_checkpointing_policy`. Use the latter."
        )
    if given:
        return checked_policy("activation_checkpointing", set(given))
    return checked_policy("activation_checkpointing_policy", policy)


def checkpoint_activations(module: nn.Module, policy: Policy | None) -> None:
    """Recompute the chosen blocks' activations in backward; in place, so parameter names do not change."""
    if policy is None:
        return
    from torch.distributed._composable import checkpoint

    if any(_checkpointed(sub) for sub in module.modules()):  # Lightning's rule: the user's own checkpointing wins
        warn_on_rank_zero(
            "FSDP checkpointing is configured, but the model already contains checkpointed layers."
            " Checkpointing will be ignored."
        )
        return
    for sub in policy_plan(module, policy):
        checkpoint(sub)


def _checkpointed(module: nn.Module) -> bool:
    """Wrapped by torch's ``checkpoint_wrapper`` or given the composable ``checkpoint`` (in ``configure_model``)."""
    from torch.distributed._composable.contract import _get_registry
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    return isinstance(module, CheckpointWrapper) or "checkpoint" in (_get_registry(module) or {})


def warn_on_rank_zero(message: str) -> None:
    """Lightning's rank-zero warning: every rank reaches it, one says it."""
    if not dist.is_initialized() or dist.get_rank() == 0:
        warnings.warn(message, UserWarning, stacklevel=3)
