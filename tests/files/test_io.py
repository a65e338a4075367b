"""verispec.files.io's packed float arrays and row stores: what row stores keep of a root's labels, and how."""

from __future__ import annotations

import pytest


def test_packed_floats_keep_every_bit_and_refuse_damage():
    """``pack_floats`` round-trips float64 arrays bit for bit (NaN, infinities, subnormals, -0.0 included), plain
    lists still read, repeated values pack smaller than a JSON list, and a damaged value is a one-line error."""
    import json

    import numpy as np

    from verispec.errors import ResultStoreError
    from verispec.files.io import pack_floats, unpack_floats

    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(size=40), [np.nan, np.inf, -np.inf, 5e-324, -0.0, 1 / 3]]).reshape(2, 23)
    back = unpack_floats(json.loads(json.dumps(pack_floats(values))))
    assert back.shape == (2, 23) and back.dtype == np.float64
    assert back.tobytes() == values.tobytes()
    assert np.array_equal(unpack_floats([[1.5, 2.0]]), np.array([[1.5, 2.0]]))
    repeated = np.tile(rng.normal(size=476), (16, 1))  # 16 equal sampled trees of one root
    assert len(json.dumps(pack_floats(repeated))) < len(json.dumps(repeated.tolist())) / 10
    packed = pack_floats(values)
    huge = {**packed, "shape": [10**12]}  # refused from its declared size, before any buffer of that size
    for damaged in ({**packed, "shape": [3, 23]}, {**packed, "shape": [2, 22]}, {**packed, "float64_zlib_b64": "AAAA"},
                    {"shape": [1]}, huge):
        with pytest.raises(ResultStoreError, match="packed array"):
            unpack_floats(damaged)


def test_a_row_store_is_written_compact_and_an_indented_one_still_resumes(tmp_path):
    """``ResultStore`` writes one unindented JSON line (issue 55: the committed stores were indented); a store
    written indented, as the older ones were, resumes with its rows and parameters."""
    import json

    from verispec.files.io import ResultStore

    path = tmp_path / "store.json"
    store = ResultStore(path, parameters={"verifier": "bv", "seed": 0})
    store.add("a", {"value": 1.5})
    text = path.read_text()
    data = json.loads(text)
    assert text == json.dumps(data, separators=(",", ":")) + "\n"
    path.write_text(json.dumps(data, indent=1) + "\n")  # the older format
    again = ResultStore(path, parameters={"verifier": "bv", "seed": 0})
    assert again.done("a") and again.rows["a"]["value"] == 1.5
    again.add("b", {"value": 2.5})
    assert json.loads(path.read_text())["rows"] == [{"key": "a", "value": 1.5}, {"key": "b", "value": 2.5}]
    assert path.read_text().count("\n") == 1
