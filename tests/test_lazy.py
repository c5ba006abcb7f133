"""The lazily re-exported names of rlvr.data and rlvr.thinking (`rlvr.lazy.lazy_names`)."""

import importlib

import pytest

import rlvr.data
import rlvr.thinking
from rlvr.lazy import lazy_names


@pytest.mark.parametrize("package", [rlvr.data, rlvr.thinking])
def test_every_name_is_its_modules_object(package):
    for module, names in package._MODULES.items():
        for name in names:
            assert getattr(package, name) is getattr(importlib.import_module(module), name), name
    assert set(package.__all__) >= {n for names in package._MODULES.values() for n in names}
    with pytest.raises(AttributeError, match=f"module '{package.__name__}' has no attribute 'nope'"):
        package.nope


def test_a_lazy_name_may_not_share_its_modules_name():
    """The import system binds a loaded submodule on its package: `from rlvr.data import decontaminate` read the
    module once `rlvr.data.decontaminate` had been imported, had that function been lazy."""
    with pytest.raises(ValueError, match=r"\['decontaminate'\] share their module's name"):
        lazy_names("rlvr.data", {"rlvr.data.decontaminate": ("decontaminate",)})
    importlib.import_module("rlvr.data.decontaminate")
    from rlvr.data import decontaminate

    assert callable(decontaminate) and decontaminate.__module__ == "rlvr.data.decontaminate"
