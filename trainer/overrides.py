"""Whether an object replaces a base class's hook: the loops call only the hooks a module, a DataModule
or a callback overrides, so a plain one pays nothing for them."""

from __future__ import annotations


def overrides(obj: object, name: str, base: type) -> bool:
    """Whether ``obj`` replaces ``base``'s hook ``name`` (in its class or on the instance)."""
    impl = getattr(obj, name, None)
    if impl is None:
        return False
    return getattr(impl, "__func__", impl) is not getattr(base, name, None)
