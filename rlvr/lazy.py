"""A package's names imported from their modules when first used (PEP 562), so that importing one module of the
package does not import its siblings (and torch with them): `rlvr data --help` reads `rlvr.data.decontaminate`
without `rlvr.data.difficulty`'s engine."""

from __future__ import annotations

import sys
from importlib import import_module
from typing import Any, Callable


def lazy_names(package: str, modules: dict[str, tuple[str, ...]]) -> tuple[Callable[[str], Any], list[str]]:
    """(`__getattr__`, `__all__`) of `package` re-exporting `modules` ({module: its names})."""
    where = {name: module for module, names in modules.items() for name in names}
    # the import system binds a loaded submodule on its package, over a lazy name of the same name
    clash = [name for name, module in where.items() if module.rsplit(".", 1)[-1] == name]
    if clash:
        raise ValueError(f"{package}: {clash} share their module's name; import them eagerly")

    def getattr_(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(where[name]), name)
        setattr(sys.modules[package], name, value)  # found directly from now on
        return value

    return getattr_, sorted(where)
