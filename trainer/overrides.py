"""Whether an object replaces a base class's hook: the loops call only the hooks a module, a DataModule
or a callback overrides, so a plain one pays nothing for them."""

from __future__ import annotations

import functools
from typing import Any


def overrides(obj: object, name: str, base: type, through_wrappers: bool = False) -> bool:
    """Whether ``obj`` replaces ``base``'s hook ``name`` (in its class or on the instance). ``through_wrappers``:
    a wrapper set on the instance (``functools.wraps``, ``partial``, ``Mock(wraps=...)``) counts as what it wraps,
    as Lightning's ``is_overridden`` decides which of a module's and a DataModule's hooks runs."""
    impl = getattr(obj, name, None)
    if through_wrappers:
        impl = _unwrapped(impl)
    if impl is None:
        return False
    return getattr(impl, "__func__", impl) is not getattr(base, name, None)


def _unwrapped(impl: Any) -> Any:
    for _ in range(8):  # a few layers at most
        if hasattr(impl, "__wrapped__"):  # first: functools.update_wrapper over a partial names the wrapped
            impl = impl.__wrapped__
        elif getattr(impl, "_mock_wraps", None) is not None:
            impl = impl._mock_wraps
        elif isinstance(impl, functools.partial):
            impl = impl.func
        else:
            break
    return impl
