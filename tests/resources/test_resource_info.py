"""The driver SDK's value type and ABCs: ExternalResourceInfo, the driver and factory ABCs and
the optional cluster-manager protocols."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accelflow
from accelflow.resources import (
    ExternalResourceDriver,
    ExternalResourceDriverFactory,
    ExternalResourceInfo,
    KubernetesResourceDecorator,
    KubernetesResources,
    YarnResourceDecorator,
    info_properties,
)

Info = ExternalResourceInfo


def test_flinks_interface_get_property_and_get_keys() -> None:
    info = Info(index="0", uuid="GPU-8f6c", name="NVIDIA H100")

    assert info.get_property("uuid") == "GPU-8f6c"
    assert info.get_property("vendor") is None
    assert list(info.get_keys()) == ["index", "name", "uuid"]


def test_it_is_a_read_only_mapping_of_strings() -> None:
    info = Info({"index": 0, "memory": 81920}, name="H100")

    assert isinstance(info, Mapping)
    assert dict(info) == {"index": "0", "memory": "81920", "name": "H100"}
    assert info["memory"] == "81920" and len(info) == 3 and "name" in info
    assert info.to_dict() == dict(info)


def test_it_is_immutable() -> None:
    info = Info(index="0")

    with pytest.raises(TypeError):
        info["index"] = "1"  # type: ignore[index]
    with pytest.raises(AttributeError):
        info.vendor = "nvidia"  # type: ignore[attr-defined]
    copied = info.to_dict()
    copied["index"] = "1"
    assert info["index"] == "0"


def test_equal_infos_are_one_set_element_and_share_a_hash() -> None:
    a, b = Info(index="1", uuid="GPU-1"), Info({"uuid": "GPU-1"}, index=1)

    assert a == b and hash(a) == hash(b)
    assert {a, b, Info(index="2")} == {a, Info(index="2")}
    assert a != Info(index="1")
    assert a != {"index": "1", "uuid": "GPU-1"}  # a plain dict is not an info


def test_addresses_sort_numerically() -> None:
    infos = [Info(index=i) for i in ("10", "2", "1", "0", "11")]
    assert [i.address for i in sorted(infos)] == ["0", "1", "2", "10", "11"]

    mig = [Info(index=i) for i in ("1:10", "1:2", "0:3", "10:0")]
    assert [i.address for i in sorted(mig)] == ["0:3", "1:2", "1:10", "10:0"]


def test_all_comparisons_work_and_are_consistent() -> None:
    two, ten = Info(index="2"), Info(index="10")

    assert two < ten and two <= ten and ten > two and ten >= two
    assert not ten < two and two <= Info(index="2") and two >= Info(index="2")
    with pytest.raises(TypeError):
        two < "3"  # noqa: B015


def test_the_address_is_the_first_of_index_uuid_id_address() -> None:
    assert Info(index="3", uuid="GPU-x").address == "3"
    assert Info(uuid="GPU-x", id="7").address == "GPU-x"
    assert Info(id="7", address="pci:0").address == "7"
    assert Info(address="0000:3b:00.0").address == "0000:3b:00.0"
    assert Info(serial="AC-1", slot="4").address == "serial=AC-1,slot=4"


def test_repr_is_readable_and_round_trips() -> None:
    info = Info(index="0", uuid="GPU-8f6c", name="NVIDIA H100")

    assert repr(info) == "ExternalResourceInfo(index='0', name='NVIDIA H100', uuid='GPU-8f6c')"
    assert eval(repr(info), {"ExternalResourceInfo": Info}) == info


def test_it_pickles_and_copies_under_its_public_name() -> None:
    info = Info(index="1", uuid="GPU-1")

    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        data = pickle.dumps(info, protocol=protocol)
        assert b"accelflow" in data and b"_api" not in data
        clone = pickle.loads(data)
        assert clone == info and hash(clone) == hash(info) and type(clone) is Info
    assert copy.deepcopy(info) == info
    assert Info.__module__ == "accelflow" and accelflow.ExternalResourceInfo is Info


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "needs at least one property"),
        (({},), {}, "needs at least one property"),
        (({"": "0"},), {}, "property names must be non-empty trimmed strings"),
        (({" index": "0"},), {}, "property names must be non-empty trimmed strings"),
        (({1: "0"},), {"index": "0"}, "property names must be non-empty trimmed strings, got 1"),
        ((), {"index": ""}, "property 'index' has an empty value"),
        ((), {"index": "  "}, "property 'index' has an empty value"),
        ((), {"index": None}, "property 'index' has an empty value (None)"),
    ],
)
def test_bad_properties_are_rejected(args: tuple[object, ...], kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Info(*args, **kwargs)  # type: ignore[arg-type]


addresses = st.one_of(
    st.integers(min_value=0, max_value=10**6).map(str),
    st.from_regex(r"[a-z]{0,2}[0-9]{1,3}(:[0-9]{1,2})?", fullmatch=True),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.builds(lambda a, v: Info(index=a, vendor=v), addresses, st.sampled_from(["x", "y"])),
                min_size=1, max_size=8))
def test_ordering_is_a_total_order_consistent_with_equality(infos: list[Info]) -> None:
    ordered = sorted(infos)
    for a, b in zip(ordered, ordered[1:]):
        assert a <= b and not b < a
    for a in infos:
        for b in infos:
            assert (a == b) == (not a < b and not b < a)
            assert (a < b) == (b > a)


# -- the driver and factory ABCs -------------------------------------------------------------


class OneDevice(ExternalResourceDriver):
    def retrieve_resource_info(self, amount: int) -> set[ExternalResourceInfo]:
        return {Info(index="0")}


def test_a_driver_must_implement_retrieve_resource_info() -> None:
    with pytest.raises(TypeError, match="retrieve_resource_info"):
        ExternalResourceDriver()  # type: ignore[abstract]


def test_the_optional_driver_hooks_do_nothing_by_default() -> None:
    driver = OneDevice()
    infos = driver.retrieve_resource_info(1)

    assert driver.isolation_env(infos) == {}
    driver.release(infos)  # no-ops that must not raise
    driver.close()


def test_a_factory_must_implement_create_external_resource_driver() -> None:
    with pytest.raises(TypeError, match="create_external_resource_driver"):
        ExternalResourceDriverFactory()  # type: ignore[abstract]


class PlainFactory(ExternalResourceDriverFactory):
    def create_external_resource_driver(self, params: Mapping[str, str]) -> ExternalResourceDriver:
        return OneDevice()


class KubernetesFactory(PlainFactory):
    def kubernetes_resources(self, params: Mapping[str, str], amount: int) -> KubernetesResources:
        return KubernetesResources(resources={"acme.com/fpga": amount})


class YarnFactory(PlainFactory):
    def yarn_resources(self, params: Mapping[str, str], amount: int) -> Mapping[str, int]:
        return {"yarn.io/fpga": amount}


def test_cluster_manager_protocols_are_detected_with_isinstance() -> None:
    assert not isinstance(PlainFactory(), KubernetesResourceDecorator)
    assert not isinstance(PlainFactory(), YarnResourceDecorator)
    assert isinstance(KubernetesFactory(), KubernetesResourceDecorator)
    assert not isinstance(KubernetesFactory(), YarnResourceDecorator)
    assert isinstance(YarnFactory(), YarnResourceDecorator)
    assert not isinstance(YarnFactory(), KubernetesResourceDecorator)


def test_kubernetes_resources_are_frozen_and_keyword_only() -> None:
    resources = KubernetesFactory().kubernetes_resources({}, 2)

    assert resources == KubernetesResources(resources={"acme.com/fpga": 2}, node_selector={}, tolerations=())
    with pytest.raises(AttributeError):
        resources.resources = {}  # type: ignore[misc]
    with pytest.raises(TypeError):
        KubernetesResources({"acme.com/fpga": 2})  # type: ignore[call-arg]


# -- a Flink-style info: the interface only, no super().__init__() (issue 12.7) --------------


class CardInfo(ExternalResourceInfo):
    """As Flink's Java interface allows: two methods over its own attributes."""

    def __init__(self, slot: int, serial: str) -> None:
        self.slot = slot
        self.serial = serial

    def get_property(self, key: str) -> str | None:
        return {"index": str(self.slot), "serial": self.serial}.get(key)

    def get_keys(self) -> list[str]:
        return ["serial", "index"]


def test_a_flink_style_info_works_as_a_value() -> None:
    a, b = CardInfo(10, "AC-10"), CardInfo(2, "AC-2")

    assert a.address == "10" and b.to_dict() == {"index": "2", "serial": "AC-2"}
    assert sorted([a, b]) == [b, a]
    assert a == Info(index="10", serial="AC-10") and hash(a) == hash(Info(index="10", serial="AC-10"))
    assert {a, CardInfo(10, "AC-10")} == {a}
    assert dict(a) == {"index": "10", "serial": "AC-10"} and len(a) == 2 and a["serial"] == "AC-10"
    assert repr(a) == "CardInfo(index='10', serial='AC-10')"
    assert info_properties(a) == {"index": "10", "serial": "AC-10"}


def test_a_flink_style_info_crosses_processes_as_the_plain_value_type() -> None:
    copied = pickle.loads(pickle.dumps(CardInfo(1, "AC-1")))
    assert type(copied) is ExternalResourceInfo
    assert copied == CardInfo(1, "AC-1")


def test_a_subclass_that_overrides_the_interface_is_read_through_it() -> None:
    class Extra(ExternalResourceInfo):
        def get_property(self, key: str) -> str | None:
            return "fpga" if key == "kind" else super().get_property(key)

        def get_keys(self) -> list[str]:
            return [*super().get_keys(), "kind"]

    info = Extra(index="0")
    assert info.to_dict() == {"index": "0", "kind": "fpga"}
    assert info == Info(index="0", kind="fpga") and hash(info) == hash(Info(index="0", kind="fpga"))


def test_info_properties_skips_missing_values_and_checks_the_keys() -> None:
    class Sparse(CardInfo):
        def get_keys(self) -> list[str]:
            return ["index", "vendor"]

    class Bad(CardInfo):
        def get_keys(self) -> str:  # type: ignore[override]
            return "index"

    assert info_properties(Sparse(0, "x")) == {"index": "0"}
    with pytest.raises(TypeError, match="Bad.get_keys\\(\\) returned str"):
        info_properties(Bad(0, "x"))
