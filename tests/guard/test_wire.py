"""verispec.guard.wire: what the code under check sends the worker is read as plain values only (issue 64, forgery).

Round trips are checked against the values themselves (equality of the decoded object, arrays bit for bit); each
hostile message is refused with ``WireError``. The negative control: ``pickle``, the format the sandbox's replies
do not use, runs the code a message names (a reduce to ``os.getpid`` here) where ``decode`` refuses the same bytes.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
from fractions import Fraction

import numpy as np
import pytest

from verispec.guard import wire


def _roundtrip(value):
    return wire.decode(wire.encode(value)[8:])


@pytest.mark.parametrize("value", [
    None, True, 0, -(10 ** 40), 1.5, float("inf"), "λ text", [1, [2, [3]]], (1, "a", None), {"a": 1, 2: (3,)},
    frozenset({1, 2}), {3}, Fraction(-7, 3), b"\x00\xff",
])
def test_plain_values_come_back_as_they_were(value):
    assert _roundtrip(value) == value and type(_roundtrip(value)) is type(value)


def test_arrays_scalars_and_rationals_come_back_bit_for_bit():
    floats = np.random.default_rng(0).random((3, 4))
    assert np.array_equal(_roundtrip(floats), floats) and _roundtrip(floats).dtype == np.float64
    ints = np.arange(6, dtype=np.int32).reshape(2, 3)[:, ::-1]  # not contiguous
    assert np.array_equal(_roundtrip(ints), ints) and _roundtrip(ints).dtype == np.int32
    exact = np.array([[Fraction(1, 3), Fraction(2, 3)]], dtype=object)
    assert _roundtrip(exact).tolist() == exact.tolist()
    assert _roundtrip(np.float64(0.1)) == np.float64(0.1) and _roundtrip(np.int64(-3)) == -3
    assert _roundtrip(np.nan != np.nan)  # a numpy bool
    assert np.isnan(_roundtrip(float("nan")))


def test_other_objects_cross_as_their_type_and_repr_only():
    class Strange:
        def __repr__(self):
            return "<strange>"

    got = _roundtrip([Strange()])[0]
    assert isinstance(got, wire.Opaque) and got.type_name == "Strange" and repr(got) == "<strange>"


def _message(body: dict, blocks: list[bytes] = ()) -> bytes:
    text = json.dumps(body).encode()
    return struct.pack("<I", len(text)) + text + b"".join(blocks)


@pytest.mark.parametrize("message", [
    b"", b"\x01\x00", _message({"v": 1}), _message({"v": 1, "blocks": [4]}),
    _message({"v": {"A": 0, "d": "<f8", "s": [2]}, "blocks": [8]}, [b"\x00" * 8]),  # 8 bytes for 2 floats
    _message({"v": {"A": 0, "d": "O", "s": [1]}, "blocks": [8]}, [b"\x00" * 8]),  # object dtype from bytes
    _message({"v": {"A": 0, "d": "<f8,<i4", "s": [1]}, "blocks": [12]}, [b"\x00" * 12]),  # a structured dtype
    _message({"v": {"A": 5, "d": "<f8", "s": [1]}, "blocks": []}),  # a block that is not there
    _message({"v": {"__reduce__": ["os.system", ["true"]]}, "blocks": []}),  # an unknown tag
    _message({"v": {"F": ["1", "0"]}, "blocks": []}),  # a fraction over zero
    _message({"v": {"S": "<f8", "v": 1}, "blocks": []}),  # a float scalar not as its repr
    _message({"v": {"D": [[[1], 2]]}, "blocks": []}),  # an unhashable key
    _message({"v": json.loads("[" * 100 + "1" + "]" * 100), "blocks": []}),  # nested too deeply
    _message({"v": 1, "blocks": []}) + b"trailing",
])
def test_a_hostile_message_is_refused(message):
    with pytest.raises(wire.WireError):
        wire.decode(message)


def test_negative_control_pickle_runs_what_the_bytes_name():
    class Reduce:
        def __reduce__(self):
            return (os.getpid, ())

    data = pickle.dumps(Reduce())
    assert pickle.loads(data) == os.getpid()  # code ran in the reader
    with pytest.raises(wire.WireError):
        wire.decode(data)
