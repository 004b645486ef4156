"""Hyper-parameters: ``save_hyperparameters`` (Lightning's semantics), ``AttributeDict`` and plain values.

``save_hyperparameters()`` reads the ``__init__`` arguments from the call stack, so one call in a
base class also sees the arguments its subclasses took (``class B(A): def __init__(self, x, **kw)``).
Checkpoints are loaded with ``weights_only=True``, so only plain values (numbers, strings, None and
lists, tuples and dicts of them) are stored; ``plain_values`` says which are left out.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import types
import warnings
from argparse import Namespace
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from torch import nn

_PRIMITIVES = (bool, int, float, str)
# The hyper-parameters a builder gives the object it builds (the CLI: the config it was built from), which
# ``save_hyperparameters`` saves instead of the ``__init__`` arguments (Lightning's ``_given_hyperparameters``).
_given: ContextVar[dict[str, Any] | None] = ContextVar("given_hyperparameters", default=None)


@contextlib.contextmanager
def given_hyperparameters(hparams: Mapping[str, Any], instantiator: str) -> Iterator[None]:
    """Objects built in this block save ``hparams`` (plus ``_instantiator``: what rebuilds them from a checkpoint)."""
    token = _given.set({**hparams, "_instantiator": instantiator})
    try:
        yield
    finally:
        _given.reset(token)


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


class HyperparametersMixin:
    """``save_hyperparameters``, ``hparams`` and ``hparams_initial`` (Lightning's ``HyperparametersMixin``): the one
    definition ``Module`` and ``DataModule`` share, and a base for your own classes that want them."""

    def save_hyperparameters(
        self,
        *args: Any,
        ignore: Sequence[str] | str | None = None,
        frame: types.FrameType | None = None,
        logger: bool = True,
    ) -> None:
        """Choose what ``self.hparams`` holds, as Lightning does; checkpoints and loggers get it.

        No ``args``: every ``__init__`` argument of this object on the call stack (base classes' and
        subclasses'), less ``ignore``. Argument names: those only. One dict or argparse.Namespace: its
        items (a checkpoint passes them back as that argument). ``frame``: the ``__init__`` frame to
        start reading from. ``logger=False`` keeps them from the loggers. Values that are not plain
        (modules, tensors) are left out of checkpoints with a warning: pass them to
        ``load_from_checkpoint`` again, or ``ignore`` them.
        """
        save_hyperparameters(self, args, ignore, frame, logger)

    @property
    def hparams(self) -> AttributeDict:
        """The hyper-parameters (``self.hparams.lr``); changes here go into checkpoints."""
        return self._hparams_state().values

    @property
    def hparams_initial(self) -> AttributeDict:
        """A copy of the hyper-parameters as they were saved (what the loggers get at fit start)."""
        return frozen(self._hparams_state().initial)

    def remove_ignored_hparams(self, ignore_list: list[str]) -> None:
        """Drop hyper-parameters a base class saved (a subclass that builds them itself), as Lightning's."""
        for key in ignore_list:
            self._hparams_state().values.pop(key, None)

    def _hparams_state(self) -> HParams:
        return state_of(self)


def state_of(obj: Any) -> HParams:
    """The ``HParams`` a Module or DataModule keeps in its ``__dict__`` (made on first use; written
    there directly so ``nn.Module.__setattr__`` never sees it). Not under Lightning's private name ``_hparams``,
    which a ported module may assign itself."""
    state: HParams = obj.__dict__.setdefault("_steadytrain_hparams", HParams())
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
    given = _given.get()
    init_args = dict(given) if given is not None else collect_init_args(obj, frame)
    values, name, namespace = select(obj, init_args, args, ignored)
    state.save(values, ignored, name, namespace, logger)
    for name in module_values(state.values):
        warnings.warn(
            f"Attribute {name!r} is an instance of `nn.Module` and is already saved during checkpointing. It is "
            f"recommended to ignore them using `self.save_hyperparameters(ignore=[{name!r}])`.",
            stacklevel=3,
        )


def drop_unpicklable(obj: Any) -> None:
    """Lightning's rule at the start of ``fit``: hyper-parameters ``pickle`` cannot write (a lambda, an open
    file) are removed from ``hparams``, each with a warning."""
    if not state_of(obj).explicit:
        return  # the automatic record: what a checkpoint cannot hold is named when it is saved
    values = obj.hparams
    for key in [k for k, v in values.items() if not is_picklable(v)]:
        warnings.warn(
            f"Attribute {key!r} removed from hparams because it cannot be pickled. You can suppress this warning by "
            f"setting `self.save_hyperparameters(ignore=[{key!r}])`.",
            stacklevel=2,
        )
        del values[key]


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


def _is_init_of_hparams_owner(frame: types.FrameType, obj: Any) -> bool:
    """An ``__init__`` frame whose ``self`` is ``obj`` or another object with hyper-parameters."""
    code = frame.f_code
    if code.co_name != "__init__" or code.co_argcount == 0:
        return False
    owner = frame.f_locals.get(code.co_varnames[0])
    return owner is obj or isinstance(owner, HyperparametersMixin)


def _is_our_wrapper(frame: types.FrameType) -> bool:
    """The frame of ``record_init_args``'s wrapper: it sits between a subclass's ``__init__`` and its base's."""
    return frame.f_code.co_name == "wrapper" and frame.f_globals.get("__name__") == __name__


def collect_init_args(obj: Any, frame: types.FrameType | None) -> dict[str, Any]:
    """The ``__init__`` arguments on the stack from ``frame`` outwards, by Lightning's rule; the outer win.

    The ``__init__`` frames of objects with hyper-parameters that follow one another are read: the class
    hierarchy's (``super().__init__(...)`` chains), and, as Lightning does, those of a Module or DataModule
    whose ``__init__`` built this one. The first frame of anything else ends the chain, so a plain object
    composing this one does not leak its arguments in.
    """
    found: list[dict[str, Any]] = []
    while frame is not None:
        if _is_init_of_hparams_owner(frame, obj):
            found.append(_frame_args(frame))
        elif found and not _is_our_wrapper(frame):
            break
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
    """What ``save_hyperparameters(*args, ignore=...)`` saves, the name Lightning records for it (the ``__init__``
    argument a dict or Namespace passed whole came from, or ``"kwargs"`` for arguments saved by name) and whether
    it was a Namespace."""
    init_args = {k: v for k, v in init_args.items() if k not in ignored}
    objects = [a for a in args if not isinstance(a, str)]
    if not args:
        return init_args, "kwargs" if init_args else None, False
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
    return {a: init_args[a] for a in args if isinstance(a, str)}, "kwargs", False


def as_dict(hp: Any) -> dict[str, Any]:
    """A dict, Mapping or argparse.Namespace as a dict; anything else is refused, as Lightning does."""
    if isinstance(hp, Namespace):
        return dict(vars(hp))
    if isinstance(hp, Mapping):
        return dict(hp)
    if isinstance(hp, _PRIMITIVES):
        raise ValueError(
            f"Primitives {_PRIMITIVES} are not allowed: save_hyperparameters() takes argument names, a dict or an "
            f"argparse.Namespace, not {type(hp).__name__} ({hp!r})."
        )
    raise ValueError(
        f"save_hyperparameters() takes argument names, a dict or an argparse.Namespace, not {type(hp).__name__}."
    )


def is_picklable(obj: object) -> bool:
    """Whether ``pickle`` can write ``obj`` (Lightning's ``utilities.parsing.is_picklable``)."""
    import pickle

    try:
        pickle.dumps(obj)
    except (pickle.PickleError, AttributeError, RuntimeError, TypeError):
        return False
    return True


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
    init: Any, saved: dict[str, Any], name: str | None, namespace: bool, overrides: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The keywords to rebuild an object with from saved hyper-parameters, and the names dropped.

    As Lightning: a dict or Namespace saved whole goes back as the argument it came from, the ``overrides`` are
    also passed as keywords, and what ``__init__`` does not take is dropped unless it takes ``**kwargs``.
    """
    params = list(inspect.signature(init).parameters.values())[1:]
    takes = {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    whole = name is not None and name in takes
    loaded: dict[str, Any] = {str(name): Namespace(**saved) if namespace else saved} if whole else dict(saved)
    merged: dict[str, Any] = {**loaded, **(overrides or {})}
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return merged, []
    return {k: v for k, v in merged.items() if k in takes}, sorted(set(merged) - takes)
