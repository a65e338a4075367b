"""The CPU's small-batch linear path (``verispec.models.cpu_linear``): the same product as torch's ``linear`` to
float32 rounding, taken only where it is meant to be, and carried by a loaded pair to its workers.

The expected values are a float64 numpy product of the same arrays (not torch's ``linear``), and the float32 bound
is the standard one for a sum of ``in`` products: |error| <= in * 2^-24 * sum_j |W_ij x_j| (a generous constant)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from verispec.errors import VerispecError  # noqa: E402
from verispec.models import cpu_linear  # noqa: E402
from verispec.models.cpu_linear import (  # noqa: E402
    MAX_ROWS,
    small_batch_linear,
    use_small_batch_linears,
    use_torch_linears,
    uses_small_batch_linears,
)


def _reference(weight, bias, inputs):
    """The product in float64 numpy and its float32 error bound, elementwise."""
    w, x = weight.detach().double().numpy(), inputs.detach().double().numpy()
    exact = x @ w.T + (0 if bias is None else bias.detach().double().numpy())
    bound = w.shape[1] * 2.0 ** -23 * (np.abs(x) @ np.abs(w).T) + 1e-30
    return exact, bound


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 64), (2, 64), (3, 64), (4, 64), (5, 64), (1, 3, 64), (2, 2, 64), (3, 3, 64),
                                   (4, 4, 64), (8, 64), (9, 64), (12, 64), (15, 64), (16, 64), (17, 64), (0, 64)])
def test_the_product_is_the_layers_to_float32_rounding(shape, bias):
    generator = torch.Generator().manual_seed(sum(shape) + bias)
    layer = torch.nn.Linear(64, 300, bias=bias)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(300, 64, generator=generator))
    inputs = torch.randn(*shape, generator=generator)
    got = small_batch_linear(layer, inputs)
    assert got.shape == (*shape[:-1], 300) and got.dtype == torch.float32
    exact, bound = _reference(layer.weight, layer.bias, inputs)
    assert np.all(np.abs(got.detach().double().numpy() - exact) <= bound)


def test_the_path_is_taken_for_a_few_float32_rows_on_a_cpu_and_torchs_linear_elsewhere(monkeypatch):
    """torch's ``linear`` is never called for 1..MAX_ROWS float32 rows (it raises here), and is called, with the
    same arguments, for more rows and for float64 (equal bit for bit to the layer's own forward)."""
    layer = torch.nn.Linear(32, 48)
    original = torch.nn.functional.linear
    calls = []

    def refuse(inputs, weight, bias=None):
        calls.append(tuple(inputs.shape))
        return original(inputs, weight, bias)

    monkeypatch.setattr(torch.nn.functional, "linear", refuse)
    for rows in range(1, MAX_ROWS + 1):
        small_batch_linear(layer, torch.randn(rows, 32))
        small_batch_linear(layer, torch.randn(1, rows, 32))
    assert calls == []
    wide = torch.randn(MAX_ROWS + 1, 32)
    assert torch.equal(small_batch_linear(layer, wide), original(wide, layer.weight, layer.bias))
    double = copy.deepcopy(layer).double()
    narrow = torch.randn(2, 32, dtype=torch.float64)
    assert torch.equal(small_batch_linear(double, narrow), original(narrow, double.weight, double.bias))
    assert calls == [(MAX_ROWS + 1, 32), (2, 32)]


def test_a_model_given_the_path_keeps_its_logits_to_rounding_and_other_models_keep_torchs():
    from tests.support.tiny_models import tiny_pair
    from verispec.models.tree_forward import CachedModel

    pair = tiny_pair(3)
    plain = copy.deepcopy(pair.target)
    layers = sum(isinstance(module, torch.nn.Linear) for module in pair.target.modules())
    assert use_small_batch_linears(pair.target) == layers > 0
    assert uses_small_batch_linears(pair.target) and not uses_small_batch_linears(plain)
    assert not uses_small_batch_linears(pair.draft)  # the instance, not the class, was given the path
    context = [1, 4, 2, 7, 3]
    for rows in range(1, MAX_ROWS + 3):
        got, want = CachedModel(pair.target), CachedModel(plain)
        got.prefill(context)
        want.prefill(context)
        tokens, parents = [(3 * i + 2) % 10 for i in range(rows)], list(range(-1, rows - 1))
        left, right = got.extend(tokens, parents), want.extend(tokens, parents)
        torch.testing.assert_close(left, right, rtol=1e-5, atol=1e-5)
    assert use_torch_linears(pair.target) == layers and not uses_small_batch_linears(pair.target)
    other = next(module for module in pair.draft.modules() if isinstance(module, torch.nn.Linear))
    other.forward = lambda inputs: torch.nn.functional.linear(inputs, other.weight, other.bias)  # not ours: kept
    assert use_torch_linears(pair.draft) == 0 and "forward" in other.__dict__
    del other.__dict__["forward"]
    back, want = CachedModel(pair.target), CachedModel(plain)
    back.prefill(context)
    want.prefill(context)
    assert torch.equal(back.extend([2, 5], [-1, 0]), want.extend([2, 5], [-1, 0]))  # torch's own again, bit for bit


def test_a_loaded_pair_takes_the_path_when_asked_and_its_source_carries_it(tmp_path, monkeypatch):
    from verispec.models.pair import load_pair
    from verispec.models.tiny import save_tiny_pair

    target, draft = save_tiny_pair(tmp_path / "pair")
    monkeypatch.delenv(cpu_linear.ENVIRONMENT_VARIABLE, raising=False)
    assert not load_pair(target, draft).small_batch_linear  # off unless asked for
    asked = load_pair(target, draft, small_batch_linear=True)
    assert asked.small_batch_linear and asked.source.small_batch_linear
    assert asked.source.load().small_batch_linear  # a worker loads it the same way, whatever its environment
    monkeypatch.setenv(cpu_linear.ENVIRONMENT_VARIABLE, "1")
    assert load_pair(target, draft).small_batch_linear
    assert not load_pair(target, draft, small_batch_linear=False).small_batch_linear
    monkeypatch.setenv(cpu_linear.ENVIRONMENT_VARIABLE, "yes")
    with pytest.raises(VerispecError, match="VERISPEC_SMALL_BATCH_LINEAR='yes': set it to 1 .* or 0"):
        load_pair(target, draft)
    with pytest.raises(VerispecError, match="True, False or None, got 'on'"):
        load_pair(target, draft, small_batch_linear="on")


def test_the_command_line_refuses_a_bad_switch_on_one_line(tmp_path):
    """Exit 2 and one line, before any model is loaded (the pair named here is not installed)."""
    command = [sys.executable, "-m", "verispec", "latency", "--target", str(tmp_path / "none"), "--draft",
               str(tmp_path / "none"), "--out", str(tmp_path / "m.json")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120,
                            env={**os.environ, cpu_linear.ENVIRONMENT_VARIABLE: "2"})
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "VERISPEC_SMALL_BATCH_LINEAR='2'" in lines[0] and "Traceback" not in result.stderr


def test_the_benchmark_runs_both_paths_side_by_side_on_a_tiny_pair(tmp_path):
    import json

    from tests.support.scripts import load_script

    module = load_script("benchmarks/bench_cpu_linear.py")
    output = tmp_path / "bench.json"
    assert module.main(["--tiny", "--repeats", "1", "--rows", "1,5", "--sizes", "2,6", "--threads", "1",
                        "--json", str(output)]) == 0
    result = json.loads(output.read_text())
    assert {row["rows"] for row in result["layers"]} == {1, 5}
    from verispec.models import cpu_linear

    assert module.main(["--tiny", "--repeats", "1", "--rows", "1", "--sizes", "10", "--threads", "1", "--unpadded",
                        "--json", str(tmp_path / "padding.json")]) == 0
    padding = json.loads((tmp_path / "padding.json").read_text())["forwards"]
    assert [row.get("padded", True) for row in padding] == [True, True, False, False]
    assert cpu_linear.product_rows(10) == 16  # the benchmark's unpadded rule undone
    assert [(row["model"], row["tokens"]) for row in result["forwards"]] == [("target", 2), ("target", 6),
                                                                              ("draft", 2), ("draft", 6)]
    for row in result["layers"] + result["forwards"]:
        assert row["ratio"] == row["path_ms"] / row["torch_ms"]
    assert all(row["max_logit_difference"] < 1e-4 for row in result["forwards"])


@pytest.mark.parametrize("rows", [1, 2, 3, MAX_ROWS])
def test_a_column_major_input_reaches_the_product_row_major(rows, monkeypatch):
    """The path's own outputs are transposed views, so the next layer's input can be column-major (an MLP's act(gate)
    * up of two of them); the product must still get W @ (a row-major x).T, the operand layout the fast kernel needs
    (column-major it took 2.9x as long on Qwen's down projection), and the same values."""
    layer = torch.nn.Linear(24, 40)
    column_major = torch.randn(24, rows).T                                        # [rows, 24], strides (1, rows)
    assert rows == 1 or not column_major.is_contiguous()
    operands = []
    original = torch.mm

    def recorded(left, right):
        operands.append(right)
        return original(left, right)

    monkeypatch.setattr(torch, "mm", recorded)
    got = small_batch_linear(layer, column_major)
    monkeypatch.setattr(torch, "mm", original)
    assert len(operands) == 1 and operands[0].T.is_contiguous()
    exact, bound = _reference(layer.weight, layer.bias, column_major)
    assert np.all(np.abs(got.detach().double().numpy() - exact) <= bound)


def test_the_product_is_taken_at_two_rows_for_one_and_at_sixteen_for_nine_to_fifteen(monkeypatch):
    """The operand's columns: one row as two, 9-15 rows as 16 (zero rows added), the other counts as they are; the
    added rows never reach the output (the values are checked against the float64 product above)."""
    from verispec.models.cpu_linear import product_rows

    assert [product_rows(rows) for rows in range(1, MAX_ROWS + 1)] == [2] + list(range(2, 9)) + [16] * 8
    layer = torch.nn.Linear(8, 5)
    widths = []
    original = torch.mm

    def recorded(left, right):
        widths.append(right.shape[1])
        return original(left, right)

    monkeypatch.setattr(torch, "mm", recorded)
    for rows in range(1, MAX_ROWS + 1):
        assert small_batch_linear(layer, torch.randn(rows, 8)).shape == (rows, 5)
    assert widths == [product_rows(rows) for rows in range(1, MAX_ROWS + 1)]


def test_result_stores_key_the_paths_version(tmp_path):
    """A decoding store timed with the path keys its version (its timings change with it): a pair with the path adds
    ``PATH_VERSION`` (2 since the input is made row-major and 16 rows are covered), one without adds nothing, and a
    store written by the path's first version (keyed ``True``) is refused by a run with this one."""
    from types import SimpleNamespace

    from verispec.files.io import ResultStore, ResultStoreError

    assert cpu_linear.PATH_VERSION == 2
    assert cpu_linear.store_key(SimpleNamespace(small_batch_linear=True)) == {"small_batch_linear": 2}
    assert cpu_linear.store_key(SimpleNamespace(small_batch_linear=False)) == {}
    path = tmp_path / "rows.json"
    ResultStore(path, parameters={"pair": "p", "small_batch_linear": True}).add("cell", {"tokens": 1})
    with pytest.raises(ResultStoreError):
        ResultStore(path, parameters={"pair": "p", **cpu_linear.store_key(SimpleNamespace(small_batch_linear=True))})
    assert ResultStore(path, parameters={"pair": "p", "small_batch_linear": True}).done("cell")
