"""Finding driver factories by import path or entry point name.

Import paths resolve real modules written to a temporary directory on ``sys.path``; entry
points come from real ``*.dist-info`` metadata in such a directory, which is what
``importlib.metadata`` reads for an installed package.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from accelflow import DriverLoadError
from accelflow.resources import (
    ExternalResourceDriverFactory,
    list_driver_entry_points,
    load_driver_factory,
)
from accelflow.testing import StaticDriverFactory

KEY = "external-resource.fpga.driver-factory.class"

DRIVER_MODULE = '''
from accelflow.resources import ExternalResourceDriverFactory
from accelflow.testing import StaticDriver

class Factory(ExternalResourceDriverFactory):
    def create_external_resource_driver(self, params):
        return StaticDriver(["0"], None)

class Outer:
    class Inner(Factory):
        pass

class NeedsArguments(Factory):
    def __init__(self, vendor):
        self.vendor = vendor

class Explodes(Factory):
    def __init__(self):
        raise OSError("no licence server")

class NotAFactory:
    pass

INSTANCE = Factory()

def function():
    return Factory()
'''


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], None]]:
    """Write importable modules; they are dropped from ``sys.modules`` afterwards."""
    written: list[str] = []
    root = tmp_path / "modules"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))

    def write(name: str, source: str) -> None:
        path = root.joinpath(*name.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(root).parents:
            if parent != Path("."):
                (root / parent / "__init__.py").touch()
        path.write_text(textwrap.dedent(source))
        written.append(name)

    yield write
    for name in list(sys.modules):
        if any(name == w or name.startswith(w.split(".")[0]) for w in written):
            del sys.modules[name]


@pytest.fixture
def distributions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str, dict[str, str]], None]:
    """Install fake distributions: a ``.dist-info`` with METADATA and entry_points.txt."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))

    def install(name: str, version: str, drivers: dict[str, str]) -> None:
        info = root / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        lines = "".join(f"{n} = {v}\n" for n, v in drivers.items())
        (info / "entry_points.txt").write_text(f"[accelflow.external_resources]\n{lines}")

    return install


def load(reference: str) -> ExternalResourceDriverFactory:
    return load_driver_factory(reference, resource="fpga", key=KEY)


def load_error(reference: str) -> DriverLoadError:
    with pytest.raises(DriverLoadError) as info:
        load(reference)
    assert (info.value.resource, info.value.key) == ("fpga", KEY)
    assert str(info.value).startswith(f"{KEY}: ")
    return info.value


# -- import paths ----------------------------------------------------------------------------


@pytest.mark.parametrize("reference", ["accelflow.testing:StaticDriverFactory", "accelflow.testing.StaticDriverFactory"])
def test_an_import_path_with_colon_or_dot_builds_the_factory(reference: str) -> None:
    assert isinstance(load(reference), StaticDriverFactory)


def test_nested_classes_and_factory_instances_are_accepted(modules: Callable[[str, str], None]) -> None:
    modules("acme.drivers", DRIVER_MODULE)

    assert type(load("acme.drivers:Outer.Inner")).__name__ == "Inner"
    instance = load("acme.drivers:INSTANCE")
    assert instance is sys.modules["acme.drivers"].INSTANCE


def test_an_unknown_module_is_named() -> None:
    error = load_error("acme_not_installed.drivers:Factory")
    assert "cannot import module 'acme_not_installed.drivers': ModuleNotFoundError" in str(error)
    assert isinstance(error.__cause__, ModuleNotFoundError)


def test_a_module_that_fails_to_import_is_named_with_its_error(modules: Callable[[str, str], None]) -> None:
    modules("acme_broken", "raise RuntimeError('the SDK needs firmware 4.2')\n")

    error = load_error("acme_broken:Factory")

    assert str(error) == (
        f"{KEY}: cannot import module 'acme_broken': RuntimeError: the SDK needs firmware 4.2"
    )
    assert isinstance(error.__cause__, RuntimeError)


def test_an_unknown_class_is_named(modules: Callable[[str, str], None]) -> None:
    modules("acme_drivers", DRIVER_MODULE)
    assert str(load_error("acme_drivers:Factroy")) == f"{KEY}: module 'acme_drivers' has no attribute 'Factroy'"
    # the dotted form is module.Class; a nested class needs the colon form
    assert str(load_error("acme_drivers.Outer.Inner")).startswith(
        f"{KEY}: cannot import module 'acme_drivers.Outer' (for 'acme_drivers.Outer.Inner', "
        "read as 'module.Class'): ModuleNotFoundError"
    )


@pytest.mark.parametrize("reference", ["org.example.someinvalidclass", "accelflow.testing.NoSuchFactory"])
def test_a_dotted_class_that_fails_to_load_is_named_as_configured(reference: str) -> None:
    """Flink's ExternalResourceUtilsTest: the configured class appears in the message (issue 12.6)."""
    error = load_error(reference)
    assert reference in str(error)
    assert error.key == KEY


def test_flinks_gpu_factory_class_is_an_alias_of_the_builtin_gpu_driver() -> None:
    from accelflow.resources.gpu import GPUDriverFactory

    factory = load("org.apache.flink.externalresource.gpu.GPUDriverFactory")
    assert type(factory) is GPUDriverFactory


def test_a_class_that_is_not_a_factory_is_rejected(modules: Callable[[str, str], None]) -> None:
    modules("acme_drivers", DRIVER_MODULE)

    assert str(load_error("acme_drivers:NotAFactory")) == (
        f"{KEY}: 'acme_drivers:NotAFactory' is not a subclass of "
        "accelflow.resources.ExternalResourceDriverFactory"
    )
    assert "is a function, not an ExternalResourceDriverFactory class" in str(load_error("acme_drivers:function"))
    assert "is a module, not an ExternalResourceDriverFactory class" in str(load_error("accelflow:resources"))


@pytest.mark.parametrize(
    ("reference", "cause"),
    [("acme_drivers:Explodes", OSError), ("acme_drivers:NeedsArguments", TypeError),
     ("accelflow.resources:ExternalResourceDriverFactory", TypeError)],
)
def test_a_constructor_that_raises_is_a_load_error(
    modules: Callable[[str, str], None], reference: str, cause: type[Exception]
) -> None:
    modules("acme_drivers", DRIVER_MODULE)

    error = load_error(reference)

    assert f"building {reference!r} failed: {cause.__name__}" in str(error)
    assert isinstance(error.__cause__, cause)


@pytest.mark.parametrize("reference", [":Factory", "acme:", "..Factory", "acme..drivers:Factory", "acme.:F", "1acme:F", "a-b:F"])
def test_a_malformed_import_path_is_named(reference: str) -> None:
    assert str(load_error(reference)) == (
        f"{KEY}: {reference!r} is not an import path: expected 'package.module:Class' or "
        "'package.module.Class', or an entry point name such as 'gpu'"
    )


# -- entry points ----------------------------------------------------------------------------


def test_an_entry_point_name_loads_its_factory(
    modules: Callable[[str, str], None], distributions: Callable[[str, str, dict[str, str]], None]
) -> None:
    modules("acme_drivers", DRIVER_MODULE)
    distributions("acme-drivers", "1.2.3", {"acme-fpga": "acme_drivers:Factory"})

    factory = load("acme-fpga")

    assert type(factory).__name__ == "Factory" and type(factory).__module__ == "acme_drivers"


def test_entry_points_are_listed_with_their_distribution(
    distributions: Callable[[str, str, dict[str, str]], None]
) -> None:
    distributions("acme-drivers", "1.2.3", {"acme-fpga": "acme_drivers:Factory", "acme-asic": "acme_drivers:A"})

    entries = {e.name: e for e in list_driver_entry_points()}

    assert entries["acme-fpga"].value == "acme_drivers:Factory"
    assert (entries["acme-fpga"].distribution, entries["acme-fpga"].version) == ("acme-drivers", "1.2.3")
    assert entries["gpu"].value == "accelflow.resources.gpu:GPUDriverFactory"
    assert entries["gpu"].distribution == "accelflow"
    names = [e.name for e in list_driver_entry_points()]
    assert names == sorted(names)


def test_an_unknown_entry_point_lists_the_registered_names(
    distributions: Callable[[str, str, dict[str, str]], None]
) -> None:
    distributions("acme-drivers", "1.2.3", {"acme-fpga": "acme_drivers:Factory"})

    error = load_error("acme-gpu")

    assert str(error) == (
        f"{KEY}: no driver named 'acme-gpu' in the entry-point group 'accelflow.external_resources' "
        "(registered: acme-fpga, gpu); give an import path such as 'package.module:Factory' or "
        "install the package that provides it"
    )


def test_an_entry_point_that_fails_to_load_is_named(
    distributions: Callable[[str, str, dict[str, str]], None]
) -> None:
    distributions("acme-drivers", "1.2.3", {"acme-fpga": "acme_gone:Factory"})

    error = load_error("acme-fpga")

    assert "loading entry point 'acme-fpga' (acme_gone:Factory) failed: ModuleNotFoundError" in str(error)
    assert isinstance(error.__cause__, ModuleNotFoundError)


def test_a_name_registered_by_two_distributions_is_ambiguous(
    distributions: Callable[[str, str, dict[str, str]], None]
) -> None:
    distributions("acme-drivers", "1.0", {"fpga": "acme_drivers:Factory"})
    distributions("other-drivers", "2.0", {"fpga": "other_drivers:Factory"})

    error = load_error("fpga")

    assert str(error) == (
        f"{KEY}: the driver name 'fpga' is registered more than once (acme_drivers:Factory from "
        "acme-drivers, other_drivers:Factory from other-drivers); uninstall one or give the "
        "import path of the one you mean"
    )
