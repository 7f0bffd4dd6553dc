"""The compiled parser of canonical path entries: same numbers and arrays as the general parsers."""

import json
import random

import numpy as np
import orjson
import pytest

import ivln_ce.data.targets as targets_mod
from ivln_ce.data.entry_parser import _number, parse_canonical


def _convert(text: str):
    buf = np.frombuffer(text.encode(), dtype=np.uint8)
    return _number(buf, 0, len(buf))


def _number_cases(rng: random.Random) -> list[str]:
    cases = ["0", "-0", "0.0", "-0.0", "1", "-1", "1.5", "1e5", "1E-5", "0e3", "-0e3", "123456789012345678",
             "9007199254740993", "9007199254740992", "0.1", "0.30000000000000004", "2.2250738585072014e-308",
             "1.7976931348623157e308", "5e-324", "1e23", "8.41e21", "7.2057594037927933e16", "0.000000001",
             "-13.649602795147395", "1.0000000000000002", "0.17669875919818878", "9999999999999999999", "123456.789e-3"]
    for _ in range(20000):
        k = rng.random()
        if k < 0.4:
            cases.append(repr(rng.gauss(0, 10) * 10 ** rng.randint(-8, 8)))
        elif k < 0.55:
            cases.append(repr(float(np.float32(rng.gauss(0, 30)))))
        elif k < 0.85:
            d = rng.randint(1, 19)
            m = str(rng.randint(10 ** (d - 1), 10**d - 1))
            p = rng.randint(0, d)
            s = m[:p] + "." + m[p:] if 0 < p < d else m
            if rng.random() < 0.5:
                s += "e" + str(rng.randint(-40, 40))
            cases.append(("-" if rng.random() < 0.5 else "") + s)
        else:  # decimal strings at and around binary half-way points
            x = rng.uniform(1, 2) * 2 ** rng.randint(-60, 60)
            cases.append(f"{(x + float(np.nextafter(x, np.inf))) / 2:.17e}")
    return cases


def test_numbers_convert_exactly_as_the_general_parser():
    converted = 0
    for text in _number_cases(random.Random(7)):
        value, end, status = _convert(text)
        assert status in (0, 1) and end == len(text), text
        if status == 1:  # left to orjson by design
            continue
        want = float(orjson.loads(text))  # the general path's value (an int literal -0 is +0.0 there)
        assert value == want and np.signbit(value) == np.signbit(want), (text, value, want)
        converted += 1
    assert converted > 18000


@pytest.mark.parametrize("text", ["", "-", "01", "1.", ".5", "1e", "1e+", "+1", "- 1", "0x10", "NaN", "Infinity"])
def test_malformed_numbers_are_not_numbers(text):
    value, end, status = _convert(text + " ")
    assert status == -1 or end != len(text) or text == "01"  # "01" parses as 0, then "1" is left over


def _canonical_text(indent, tours):
    return json.dumps(tours, indent=indent, ensure_ascii=False).encode()  # escapes go to the general parser


def test_canonical_layouts_use_the_compiled_parser_and_equal_the_general_path(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    tours = {str(t): [{"position": [float(rng.normal()) * 10 ** int(rng.integers(-3, 4)), 0.17, int(rng.integers(-5, 5))],
                       "phase": ["agent", "oracle_goal", "oracle_start"][int(rng.integers(0, 3))],
                       "episode_id": ["1", "2", "é3", "4"][k * 4 // 50]} for k in range(50)] for t in range(5)}
    for indent in (None, 2, 4):
        path = tmp_path / f"a{indent}.json"
        path.write_bytes(_canonical_text(indent, tours))
        general = []
        monkeypatch.setattr(targets_mod._FastReader, "_general", lambda self, *a: general.append(a))
        compiled = list(targets_mod.iter_agent_paths(path))
        assert not general, "canonical entries must not need the general parser"
        monkeypatch.undo()
        monkeypatch.setattr(targets_mod, "_parse_canonical", lambda *a: None)  # general path only
        reference = list(targets_mod.iter_agent_paths(path))
        monkeypatch.undo()
        assert [k for k, _ in compiled] == [k for k, _ in reference] == list(tours)
        for (_, x), (_, y) in zip(compiled, reference):
            np.testing.assert_array_equal(x.positions, y.positions)
            np.testing.assert_array_equal(x.phases, y.phases)
            np.testing.assert_array_equal(x.episodes, y.episodes)
            assert x.episode_ids == y.episode_ids


@pytest.mark.parametrize("entry", [
    '{"phase": "agent", "position": [0, 0, 0], "episode_id": "1"}',  # another key order
    '{"position": [0, 0, 0], "phase": "agent", "episode_id": 1}',  # an integer id
    '{"position": [0, 0, 0], "phase": "agent", "episode_id": "\\u0031"}',  # an escape
    '{"position": [0, 0, 0], "phase": "agent", "episode_id": "1", "x": 1}',  # an extra key
    '{"position": [0, 0, true], "phase": "agent", "episode_id": "1"}',
    '{"position": [0, 0, 0], "phase": "agents", "episode_id": "1"}',
    '{"position": [0, 0, 0], "phase": "agent", "episode_id": ""}',
])
def test_anything_else_is_left_to_the_general_parser(entry):
    text = (entry + ", " + entry).encode()
    assert parse_canonical(text, 0, len(text)) is None


def test_numbers_the_fast_conversion_refuses_are_converted_by_orjson():
    text = b'{"position": [1.00000000000000000000001, 4.9e-324, 123456789012345678901234], "phase": "agent", "episode_id": "7"}'
    pos, codes, ids, runs = parse_canonical(text, 0, len(text))
    assert pos.tolist() == [[1.0, 5e-324, 1.2345678901234568e23]] and codes.tolist() == [0] and ids == ["7"]
