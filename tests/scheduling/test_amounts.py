"""Exact request amounts: parsed into Fractions, bad ones refused naming the operator."""

from __future__ import annotations

from fractions import Fraction

import pytest

from accelflow import ConfigError
from accelflow.scheduling import ResourceProfile, format_amount, parse_amount


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, Fraction(1)),
        (2, Fraction(2)),
        (0.5, Fraction(1, 2)),
        (0.1, Fraction(1, 10)),  # exactly one tenth, not 0.1000000000000000055...
        (0.7, Fraction(7, 10)),
        (2.0, Fraction(2)),
        ("0.25", Fraction(1, 4)),
        ("1/3", Fraction(1, 3)),
        (" 1/9 ", Fraction(1, 9)),
        (Fraction(1, 31235), Fraction(1, 31235)),
        ("3", Fraction(3)),
    ],
)
def test_amounts_parse_exactly(value: object, expected: Fraction) -> None:
    amount = parse_amount(value, what="gpu")  # type: ignore[arg-type]
    assert amount == expected
    assert isinstance(amount, Fraction)


def test_ten_tenths_make_exactly_one_device() -> None:
    tenth = parse_amount(0.1, what="gpu")
    assert sum([tenth] * 10, Fraction(0)) == 1
    total = 0.0
    for _ in range(10):  # plain float adds: sum() compensates rounding from Python 3.12 on
        total += 0.1
    assert total != 1  # the float trap the exact parse avoids


def test_three_thirds_make_exactly_one_device() -> None:
    third = parse_amount("1/3", what="gpu")
    assert third * 3 == 1


@pytest.mark.parametrize("value", [1.5, "1.5", "3/2", Fraction(5, 4), 2.25])
def test_a_share_above_one_device_is_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="must fit on one device") as info:
        parse_amount(value, what="operator 'classify' resources['gpu']")  # type: ignore[arg-type]
    assert info.value.keys == ("operator 'classify' resources['gpu']",)


@pytest.mark.parametrize("value", [0, 0.0, "0", -1, -0.5, "-1/3"])
def test_zero_and_negative_amounts_are_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="positive"):
        parse_amount(value, what="gpu")  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [True, False])
def test_booleans_are_refused(value: bool) -> None:
    with pytest.raises(ConfigError, match="number of devices"):
        parse_amount(value, what="gpu")


@pytest.mark.parametrize("value", ["lots", "", "1/0", "0x10", None, [1], float("nan"), float("inf")])
def test_junk_is_refused_with_a_suggestion(value: object) -> None:
    with pytest.raises(ConfigError, match=r"such as 1, 0.5 or '1/3'"):
        parse_amount(value, what="gpu")  # type: ignore[arg-type]


def test_profile_errors_name_the_operator_and_resource() -> None:
    with pytest.raises(ConfigError) as info:
        ResourceProfile.parse({"gpu": 1.5}, operator="classify")
    assert info.value.keys == ("operator 'classify' resources['gpu']",)
    assert "classify" in str(info.value) and "1.5" in str(info.value)


@pytest.mark.parametrize(
    ("requests", "match"),
    [
        ({"gpu": 0}, "positive"),
        ({"gpu": -2}, "positive"),
        ({"gpu": True}, "number of devices"),
        ({"gpu": "junk"}, "such as"),
        ({1: 1}, "resource names must be strings"),
        ({"": 1}, "resource names must be strings"),
        ([("gpu", 1)], "must be a mapping"),
    ],
)
def test_bad_profiles_are_refused_naming_the_operator(requests: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        ResourceProfile.parse(requests, operator="embed")  # type: ignore[arg-type]
    assert all("operator 'embed'" in key for key in info.value.keys)


def test_profile_is_an_immutable_hashable_mapping() -> None:
    a = ResourceProfile.parse({"gpu": 0.25, "fpga": "2"}, operator="x")
    b = ResourceProfile.parse({"fpga": 2, "gpu": "1/4"}, operator="y")
    assert a == b and hash(a) == hash(b)
    assert dict(a) == {"fpga": Fraction(2), "gpu": Fraction(1, 4)}
    assert list(a) == ["fpga", "gpu"]
    assert repr(a) == "ResourceProfile(fpga=2, gpu=0.25)"
    assert ResourceProfile.parse(None, operator="x") == ResourceProfile()
    assert not ResourceProfile()
    assert a != ResourceProfile.parse({"gpu": 0.25}, operator="x")


@pytest.mark.parametrize(
    ("amount", "text"),
    [(Fraction(1), "1"), (Fraction(3), "3"), (Fraction(1, 4), "0.25"), (Fraction(3, 10), "0.3"),
     (Fraction(1, 3), "1/3"), (Fraction(1, 100), "0.01"), (Fraction(2, 7), "2/7")],
)
def test_format_amount_is_exact_and_readable(amount: Fraction, text: str) -> None:
    assert format_amount(amount) == text
