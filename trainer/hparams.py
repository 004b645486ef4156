"""Hyper-parameters: ``save_hyperparameters`` (Lightning's semantics), ``AttributeDict`` and plain values.

``save_hyperparameters()`` reads the ``__init__`` arguments from the call stack, so one call in a
base class also sees the arguments its subclasses took (``class B(A): def __init__(self, x, **kw)``).
Checkpoints are loaded with ``weights_only=True``, so only plain values (numbers, strings, None and
lists, tuples and dicts of them) are stored; ``plain_values`` says which are left out.
"""

from __future__ import annotations

import copy
import functools
import inspect
import types
import warnings
from argparse import Namespace
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

_CO_VARARGS = inspect.CO_VARARGS
_CO_VARKEYWORDS = inspect.CO_VARKEYWORDS


class AttributeDict(dict[str, Any]):
    """A dict whose keys are attributes too: ``hparams.lr`` reads and writes ``hparams["lr"]``."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as err:
            raise AttributeError(f"no hyper-parameter {key!r}; saved: {sorted(self)}") from err

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value

    def __delattr__(self, key: str) -> None:
        try:
            del self[key]
        except KeyError as err:
            raise AttributeError(key) from err


@dataclass
class HParams:
    """One module's hyper-parameters and how they were saved (what a checkpoint needs to rebuild it)."""

    values: AttributeDict = field(default_factory=AttributeDict)
    initial: AttributeDict = field(default_factory=AttributeDict)
    name: str | None = None  # the ``__init__`` argument a dict or Namespace was passed whole as
    namespace: bool = False  # ... and it was an argparse.Namespace
    log: bool = True  # send them to the loggers at fit start
    explicit: bool = False  # save_hyperparameters ran: the automatic record stays out

    def save(self, values: Mapping[str, Any], ignored: set[str], name: str | None, namespace: bool, log: bool) -> None:
        """Lightning's ``save_hyperparameters``: merge, drop ``ignore`` (a base class's too), freeze a copy."""
        self.values.update(values)
        for key in ignored:
            self.values.pop(key, None)
        self.name, self.namespace, self.log, self.explicit = name, namespace, log, True
        self.initial = frozen(self.values)

    def record(self, init_args: Mapping[str, Any]) -> None:
        """The automatic record of a module that never called ``save_hyperparameters`` (entries it set win)."""
        if not self.explicit:
            self.values = AttributeDict({**init_args, **self.values})
            self.initial = frozen(self.values)


def state_of(obj: Any) -> HParams:
    """The ``HParams`` a Module or DataModule keeps in its ``__dict__`` (made on first use; written
    there directly so ``nn.Module.__setattr__`` never sees it)."""
    state: HParams = obj.__dict__.setdefault("_hparams", HParams())
    return state


def save_hyperparameters(
    obj: Any, args: tuple[Any, ...], ignore: Sequence[str] | str | None, frame: types.FrameType | None, logger: bool
) -> None:
    """The body of ``Module.save_hyperparameters`` and ``DataModule.save_hyperparameters`` (Lightning's
    semantics). ``frame``: where the ``__init__`` arguments are read from; None: the frame that called
    the method (the user's ``__init__``)."""
    if frame is None:
        frame = inspect.currentframe().f_back.f_back  # type: ignore[union-attr]
    state = state_of(obj)
    if len(args) == 1 and not isinstance(args[0], str) and not args[0]:
        state.explicit = True  # an empty dict or Namespace saves nothing, as Lightning
        return
    ignored = ignored_names(ignore)
    values, name, namespace = select(obj, collect_init_args(obj, frame), args, ignored)
    state.save(values, ignored, name, namespace, logger)
    if modules := module_values(state.values):
        warnings.warn(
            f"hyper-parameters {modules} of {type(obj).__name__} are nn.Modules: their weights are in the "
            f"checkpoint already. Leave them out with save_hyperparameters(ignore={modules}).",
            stacklevel=3,
        )


# ---- reading ``__init__`` arguments -------------------------------------------------------------------
def record_init_args(init: Any) -> Any:
    """Wrap a subclass ``__init__`` so the outermost call's arguments are recorded as ``hparams``
    (unless ``save_hyperparameters`` chose them), so ``load_from_checkpoint`` can rebuild any module."""

    @functools.wraps(init)
    def wrapper(self: nn.Module, *args: Any, **kwargs: Any) -> None:
        outermost = not self.__dict__.get("_hparams_recorded", False)
        if outermost:
            object.__setattr__(self, "_hparams_recorded", True)
        init(self, *args, **kwargs)
        if outermost:
            state_of(self).record(bound_init_args(init, self, args, kwargs))

    return wrapper


def bound_init_args(init: Any, obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """One ``__init__`` call's arguments by name: defaults filled, ``**kwargs`` merged, ``*args`` left out."""
    signature = inspect.signature(init)
    bound = signature.bind(obj, *args, **kwargs)
    bound.apply_defaults()
    params = dict(bound.arguments)
    params.pop(next(iter(signature.parameters)), None)  # self
    for name, param in signature.parameters.items():
        if param.kind is param.VAR_KEYWORD:
            params.update(params.pop(name, {}))
        elif param.kind is param.VAR_POSITIONAL:
            params.pop(name, None)
    return params


def _frame_args(frame: types.FrameType) -> dict[str, Any]:
    """A frame's arguments as its locals hold them now, ``**kwargs`` merged, ``self`` and ``*args`` left out."""
    code = frame.f_code
    local = frame.f_locals
    count = code.co_argcount + code.co_kwonlyargcount
    names = list(code.co_varnames[1:count])
    extra = count + (1 if code.co_flags & _CO_VARARGS else 0)
    found = {name: local[name] for name in names if name in local}
    if code.co_flags & _CO_VARKEYWORDS:
        found.update(local.get(code.co_varnames[extra], {}))
    return found


def _is_init_of(frame: types.FrameType, obj: Any) -> bool:
    code = frame.f_code
    if code.co_name != "__init__" or code.co_argcount == 0:
        return False
    return frame.f_locals.get(code.co_varnames[0]) is obj


def collect_init_args(obj: Any, frame: types.FrameType | None) -> dict[str, Any]:
    """Every ``__init__`` argument of ``obj`` on the stack from ``frame`` outwards; the subclass's win.

    Frames are matched by their ``self`` being ``obj``, so wrappers and helpers in between do not
    end the search, and objects built inside ``__init__`` do not leak their arguments in.
    """
    found: list[dict[str, Any]] = []
    while frame is not None:
        if _is_init_of(frame, obj):
            found.append(_frame_args(frame))
        frame = frame.f_back
    merged: dict[str, Any] = {}
    for args in found:  # innermost (base class) first, so the outer (subclass) values win
        merged.update(args)
    return merged


def ignored_names(ignore: Sequence[str] | str | None) -> set[str]:
    return {ignore} if isinstance(ignore, str) else {i for i in ignore or () if isinstance(i, str)}


def select(
    obj: Any, init_args: dict[str, Any], args: tuple[Any, ...], ignored: set[str]
) -> tuple[dict[str, Any], str | None, bool]:
    """What ``save_hyperparameters(*args, ignore=...)`` saves, the ``__init__`` argument it came from
    (a dict or Namespace passed whole) and whether it was a Namespace."""
    init_args = {k: v for k, v in init_args.items() if k not in ignored}
    objects = [a for a in args if not isinstance(a, str)]
    if not args:
        return init_args, None, False
    if len(objects) == 1:
        given = objects[0]
        name = next((k for k, v in init_args.items() if v is given), None)
        return as_dict(given), name, isinstance(given, Namespace)
    missing = [a for a in args if isinstance(a, str) and a not in init_args]
    if missing:
        raise ValueError(
            f"save_hyperparameters{tuple(args)!r}: {missing} are not __init__ arguments of {type(obj).__name__} "
            f"(it has {sorted(init_args)})."
        )
    return {a: init_args[a] for a in args if isinstance(a, str)}, None, False


def as_dict(hp: Any) -> dict[str, Any]:
    """A dict, Mapping or argparse.Namespace as a dict; anything else is refused, as Lightning does."""
    if isinstance(hp, Namespace):
        return dict(vars(hp))
    if isinstance(hp, Mapping):
        return dict(hp)
    raise ValueError(
        f"save_hyperparameters() takes argument names, a dict or an argparse.Namespace, not {type(hp).__name__}."
    )


def frozen(hparams: Mapping[str, Any]) -> AttributeDict:
    """A deep copy, so later changes to ``hparams`` do not show. ``nn.Module`` values are shared, not copied
    (their weights are in the checkpoint anyway), and so is what cannot be deep-copied."""
    copied = AttributeDict()
    for key, value in hparams.items():
        try:
            copied[key] = value if isinstance(value, nn.Module) else copy.deepcopy(value)
        except Exception:  # a lock, a generator, an open file: keep the object itself
            copied[key] = value
    return copied


def module_values(hparams: Mapping[str, Any]) -> list[str]:
    """The names holding an ``nn.Module`` (Lightning warns about them: they belong in ``ignore``)."""
    return sorted(k for k, v in hparams.items() if isinstance(v, nn.Module))


# ---- what a weights-only checkpoint can hold ----------------------------------------------------------
_DROP = object()


def _plain(value: Any) -> Any:
    """``value`` as builtin types only (what ``weights_only`` loading accepts), or ``_DROP``.

    Subclasses of int, float and str (numpy scalars, str enums) become the builtin type; dict
    subclasses become dicts. Tensors and other objects are dropped.
    """
    if value is None or type(value) is bool:
        return value
    for kind in (int, float, str):
        if isinstance(value, kind) and not isinstance(value, bool):
            return kind(value)
    if type(value) in (list, tuple):
        items = [_plain(v) for v in value]
        return _DROP if any(v is _DROP for v in items) else type(value)(items)
    if isinstance(value, dict):
        pairs = {k: _plain(v) for k, v in value.items()}
        ok = all(isinstance(k, str) and v is not _DROP for k, v in pairs.items())
        return {str(k): v for k, v in pairs.items()} if ok else _DROP
    return _DROP


def plain_values(hparams: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(the values a checkpoint stores, the names left out because they are not plain)."""
    kept: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in hparams.items():
        converted = _plain(value)
        if converted is _DROP:
            dropped.append(key)
        else:
            kept[key] = converted
    return kept, sorted(dropped)


def dropped_warning(dropped: list[str], cls_name: str) -> str:
    """Names the values left out of a checkpoint and how to load it anyway."""
    passed = ", ".join(f"{name}=..." for name in dropped)
    return (
        f"hyper-parameters {dropped} of {cls_name} are not plain values (numbers, strings, lists and dicts of them), "
        f"so they are left out of the checkpoint: pass them again with {cls_name}.load_from_checkpoint(path, "
        f"{passed}), or leave them out with save_hyperparameters(ignore={dropped})."
    )


def rebuild_kwargs(
    init: Any, saved: dict[str, Any], name: str | None, namespace: bool
) -> tuple[dict[str, Any], list[str]]:
    """The keywords to rebuild a module with from saved hyper-parameters, and the saved names dropped.

    As Lightning: values ``__init__`` does not take are dropped unless it takes ``**kwargs``, and a
    dict or Namespace saved whole goes back as the argument it came from.
    """
    params = list(inspect.signature(init).parameters.values())[1:]
    takes = {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    if name is not None and name in takes:
        return {name: Namespace(**saved) if namespace else saved}, []
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return dict(saved), []
    return {k: v for k, v in saved.items() if k in takes}, sorted(set(saved) - takes)
