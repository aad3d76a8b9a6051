"""The value parsers behind every config key: what they accept, and the rule they state."""

from __future__ import annotations

from fractions import Fraction

import pytest

from accelflow.config import _parse as p


@pytest.mark.parametrize(("value", "expected"), [(1, 1), ("7", 7), (" 2 ", 2), ("+3", 3)])
def test_positive_int_accepts_whole_numbers_from_one(value: object, expected: int) -> None:
    assert p.positive_int(value) == expected


@pytest.mark.parametrize(
    "value", [0, -1, "0", "-5", 1.0, 1.5, "1.5", "1e2", "", "one", True, False, None, [1], "٣", "9" * 200]
)
def test_positive_int_rejects_everything_else(value: object) -> None:
    with pytest.raises(ValueError, match=r"^expected a positive integer, got "):
        p.positive_int(value)


@pytest.mark.parametrize(("value", "expected"), [(0, 0), ("0", 0), ("12", 12)])
def test_non_negative_int(value: object, expected: int) -> None:
    assert p.non_negative_int(value) == expected


@pytest.mark.parametrize("value", [-1, "-1", "x", 0.0, True])
def test_non_negative_int_rejects(value: object) -> None:
    with pytest.raises(ValueError, match=r"^expected an (integer|integer >= 0), got "):
        p.non_negative_int(value)


@pytest.mark.parametrize(("value", "expected"), [(0, 0), ("8081", 8081), (65535, 65535)])
def test_port(value: object, expected: int) -> None:
    assert p.port(value) == expected


@pytest.mark.parametrize("value", [-1, 65536, "http"])
def test_port_rejects(value: object) -> None:
    with pytest.raises(ValueError, match=r"^expected (a port number 0\.\.65535|an integer), got "):
        p.port(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(2, Fraction(2)), ("0.25", Fraction(1, 4)), ("1/3", Fraction(1, 3)), (0.1, Fraction(1, 10)),
     (" 1.5 ", Fraction(3, 2)), ("2e3", Fraction(2000)), (Fraction(1, 7), Fraction(1, 7))],
)
def test_positive_number_is_exact(value: object, expected: Fraction) -> None:
    assert p.positive_number(value) == expected


@pytest.mark.parametrize(
    "value", [0, "0", -1, "-0.5", "1/0", "nan", "inf", float("nan"), float("inf"), True, "", "x", "1e99999999"]
)
def test_positive_number_rejects(value: object) -> None:
    with pytest.raises(ValueError, match=r"^expected a positive number"):
        p.positive_number(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(10, 10.0), (0.5, 0.5), ("10", 10.0), ("2.5 s", 2.5), ("500 ms", 0.5), ("1 min", 60.0),
     ("2m", 120.0), ("1h", 3600.0), ("3 SEC", 3.0)],
)
def test_seconds(value: object, expected: float) -> None:
    assert p.seconds(value) == expected


@pytest.mark.parametrize(
    "value",
    [0, "0 s", -1, "-1 s", "soon", "10 days", True, float("nan"), float("inf"), 10**400, "9" * 400, None],
)
def test_seconds_rejects(value: object) -> None:
    with pytest.raises(ValueError, match=r"^expected a (positive, finite duration|duration|"
                                         r"duration of sensible size)"):
        p.seconds(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), ("true", True), ("Yes", True), ("on", True), ("1", True),
     ("false", False), ("NO", False), ("off", False), ("0", False)],
)
def test_boolean(value: object, expected: bool) -> None:
    assert p.boolean(value) is expected


@pytest.mark.parametrize("value", ["maybe", "", None, 2])
def test_boolean_rejects(value: object) -> None:
    with pytest.raises(ValueError, match=r"^expected true or false, got "):
        p.boolean(value)


def test_string_is_trimmed_and_converts_scalars() -> None:
    assert p.string("  nvidia.com/gpu ") == "nvidia.com/gpu"
    assert p.string(42) == "42"


@pytest.mark.parametrize(("value", "message"), [
    ("", "must not be empty"), ("   ", "must not be empty"), (None, "has no value"),
    ({"a": 1}, "expected a string"), ([1], "expected a string"),
])
def test_string_rejects_empty_null_and_collections(value: object, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}"):
        p.string(value)


def test_choice_is_case_insensitive_and_lists_its_options() -> None:
    parse = p.choice("fail", "degrade")
    assert parse(" Degrade ") == "degrade"
    assert parse.__doc__ == "one of fail, degrade"
    for bad in ("ignore", None, "", True):
        with pytest.raises(ValueError, match=r"^expected one of fail, degrade; got "):
            parse(bad)


def test_a_null_value_is_not_the_choice_none() -> None:
    with pytest.raises(ValueError):
        p.choice("none", "fixed-delay")(None)
    assert p.choice("none", "fixed-delay")("none") == "none"


def test_json_object_from_text_or_mapping() -> None:
    assert p.json_object('{"GPU": 2}') == {"GPU": 2}
    assert p.json_object({"GPU": 2}) == {"GPU": 2}


@pytest.mark.parametrize("value", ["[1]", "{", "nope", "[" * 100_000])
def test_json_object_rejects(value: str) -> None:
    with pytest.raises(ValueError, match=r"^expected a JSON object"):
        p.json_object(value)


def test_json_list_from_text_or_sequence() -> None:
    assert p.json_list('[{"key": "nvidia.com/gpu"}]') == [{"key": "nvidia.com/gpu"}]
    assert p.json_list(({"a": "b"},)) == [{"a": "b"}]


@pytest.mark.parametrize("value", ["{}", "[", "x", "[" * 100_000])
def test_json_list_rejects(value: str) -> None:
    with pytest.raises(ValueError, match=r"^expected a JSON list"):
        p.json_list(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("a=1, b = 2", {"a": "1", "b": "2"}), ('{"a": 1}', {"a": "1"}), ({"a": 1}, {"a": "1"}),
     ("", {}), ("a=", {"a": ""}), ("a=b=c", {"a": "b=c"})],
)
def test_string_map(value: object, expected: dict[str, str]) -> None:
    assert p.string_map(value) == expected


@pytest.mark.parametrize("value", ["a", "=b", "a=1,b", '{"a"'])
def test_string_map_rejects(value: str) -> None:
    with pytest.raises(ValueError, match=r"^expected (key=value pairs|a JSON object)"):
        p.string_map(value)


def test_every_parser_has_a_one_line_docstring_for_the_docs() -> None:
    parsers = [p.positive_int, p.non_negative_int, p.port, p.positive_number, p.seconds,
               p.boolean, p.string, p.choice("a", "b"), p.json_object, p.string_map, p.json_list]
    for parser in parsers:
        assert parser.__doc__ and parser.__doc__.strip(), parser


# -- issue 16, item 10: bounded parsers ------------------------------------------------------


def test_int_in_range_states_the_bound_and_why() -> None:
    parse = p.int_in_range(1, 8, "each one is a process")
    assert [parse(1), parse("8")] == [1, 8]
    with pytest.raises(ValueError, match=r"^expected a positive integer up to 8 \(each one is a process\), got 9"):
        parse(9)
    with pytest.raises(ValueError, match=r"^expected a positive integer up to 8, got 0 \(int\)$"):
        parse(0)
    with pytest.raises(ValueError, match=r"^expected an integer from 0 to 8, got 'x'$"):
        p.int_in_range(0, 8)("x")


@pytest.mark.parametrize("value", ["2Gi", "512Mi", "1.5Gi", "2G", "1000", "3", "1e9", "+1Gi", 4096])
def test_memory_size_accepts_kubernetes_quantities_and_keeps_the_text(value: object) -> None:
    assert p.memory_size(value) == str(value).strip()


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("-5Gi", "must be positive"), ("0", "must be positive"), ("2GB", "not a Kubernetes quantity"),
     ("", "not a Kubernetes quantity"), (None, "not a Kubernetes quantity"), (True, "not a Kubernetes quantity"),
     ("500m", "did you mean 'Mi'"), ("1.5", "not a whole number of bytes"), ("2Pi", "more than the 1Pi"),
     ("9" * 40, "not a Kubernetes quantity"), ("1e99999", "not a Kubernetes quantity")],
)
def test_memory_size_rejects(value: object, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        p.memory_size(value)


def test_durations_are_bounded_by_a_year() -> None:
    assert p.seconds(p.MAX_SECONDS) == p.MAX_SECONDS
    with pytest.raises(ValueError, match="at most one year"):
        p.seconds(p.MAX_SECONDS + 1)
