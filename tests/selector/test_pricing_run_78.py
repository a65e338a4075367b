"""One run, one price (issue 78, item 3; ``verispec.selector.verification_cost.pricing_run``): a priced regime says
whether its forwards (the latency model's ``measured`` run) and its verification (the cost file's rows) were timed in
one run on one box. Hand-made records: back to back on one box is one run; the same box days apart, another CPU, or
a half with no record is not, and the words name the days. The latency model keeps its run through a file and through
added tree sizes; the verdict's priced entry and the docs' table carry the words."""

from __future__ import annotations

import json

import pytest

from verispec.latency import LatencyError, LatencyModel
from verispec.selector.verification_cost import ONE_RUN_GAP_S, pricing_run, run_span, timed_span


def _record(date: str, seconds: float, cpu: str = "AMD EPYC", cores: int = 2) -> dict:
    return {"command": "verispec latency --pair qwen-coder", "commit": "0" * 40, "date": date,
            "machine": {"cores": cores, "cpu": cpu, "threads": 2, "device": "cpu", "load": 0.3, "python": "3.11"},
            "inputs": {}, "seconds": seconds}


#: Forwards timed 15:00:00-15:05:00 on 2026-11-30.
FORWARDS = _record("2026-11-30T15:00:00Z", 300)


def _verification(start: str, end: str, cpu: str = "AMD EPYC", cores: int = 2) -> dict:
    return {"start": start, "end": end, "cpu": cpu, "cores": cores, "load": 0.4}


def test_back_to_back_on_one_box_is_one_run():
    run = pricing_run(FORWARDS, _verification("2026-11-30T15:06:00Z", "2026-11-30T15:11:00Z"))
    assert run["one_run"] is True and run["gap_s"] == 60.0  # 15:05 to 15:06
    assert run["words"] == "forwards and verification timed in one run on AMD EPYC, 2026-11-30"
    assert run["forwards"] == {"start": "2026-11-30T15:00:00Z", "end": "2026-11-30T15:05:00Z", "cpu": "AMD EPYC",
                               "cores": 2, "load": 0.3}
    # verification first, forwards after: the gap is measured either way
    before = pricing_run(FORWARDS, _verification("2026-11-30T14:00:00Z", "2026-11-30T14:59:00Z"))
    assert before["one_run"] is True and before["gap_s"] == 60.0


def test_the_same_box_days_apart_is_two_runs_naming_the_days():
    """The negative control of the rule: the same box and CPU, the verification three days later, as the committed
    cpu regime was priced before issue 78."""
    run = pricing_run(FORWARDS, _verification("2026-12-03T01:08:38Z", "2026-12-03T01:13:18Z"))
    assert run["one_run"] is False
    assert run["words"] == "two runs: forwards timed 2026-11-30 on AMD EPYC, verification 2026-12-03 on AMD EPYC"
    # at the limit and just past it
    end = 15 * 3600 + 300  # 15:05:00 in seconds of the day
    at = _verification(_clock(end + ONE_RUN_GAP_S), _clock(end + ONE_RUN_GAP_S + 60))
    past = _verification(_clock(end + ONE_RUN_GAP_S + 1), _clock(end + ONE_RUN_GAP_S + 60))
    assert pricing_run(FORWARDS, at)["one_run"] is True and pricing_run(FORWARDS, past)["one_run"] is False


def _clock(seconds_of_day: int) -> str:
    hours, rest = divmod(seconds_of_day, 3600)
    return f"2026-11-30T{hours:02d}:{rest // 60:02d}:{rest % 60:02d}Z"


def test_another_box_in_the_same_hour_is_two_runs():
    for cpu, cores in (("Intel(R) Xeon(R) Processor", 2), ("AMD EPYC", 16)):
        run = pricing_run(FORWARDS, _verification("2026-11-30T15:06:00Z", "2026-11-30T15:11:00Z", cpu, cores))
        assert run["one_run"] is False and run["words"].startswith("two runs")


def test_a_half_without_a_record_is_said():
    verification = _verification("2026-11-30T15:06:00Z", "2026-11-30T15:11:00Z")
    run = pricing_run(None, verification)
    assert run["one_run"] is False and run["forwards"] is None
    assert run["words"] == "verification timed 2026-11-30 on AMD EPYC; the forwards' run unrecorded"
    both = pricing_run({"date": "yesterday"}, {"start": "?"})
    assert both["one_run"] is False and both["words"] == "the forwards' and the verification's runs unrecorded"


def test_a_cost_files_span_comes_from_its_rows_when_each_has_its_minute():
    record = _record("2026-11-30T15:06:00Z", 280)
    rows = [{"key": "a", "date": "2026-11-29T09:00:00Z"}, {"key": "b", "date": "2026-11-30T15:10:00Z"}]
    # a resumed file: its first row was timed the day before its record's run
    assert timed_span({"record": record, "rows": rows})["start"] == "2026-11-29T09:00:00Z"
    assert timed_span({"record": record, "rows": rows})["end"] == "2026-11-30T15:10:00Z"
    # rows without their minute (a file written before issue 78): the record's start and seconds
    old = timed_span({"record": record, "rows": [{"key": "a"}, rows[1]]})
    assert (old["start"], old["end"]) == ("2026-11-30T15:06:00Z", "2026-11-30T15:10:40Z")
    assert timed_span({"rows": rows}) is None and run_span({"date": "2026-11-30T15:06:00Z"}) is None


def test_a_latency_model_keeps_its_run_through_a_file_and_added_sizes():
    model = LatencyModel(60.0, (1, 8), (100.0, 140.0), "ms", "measured on a pair", measured=FORWARDS)
    again = LatencyModel.from_dict(json.loads(json.dumps(model.as_dict())))
    assert again.measured == FORWARDS and again == model and hash(again) == hash(model)
    sized = again.with_tree_sizes("T=1", {"chain:2": [[3, 3, [1, 1]]]}, "hand-made")
    assert sized.measured == FORWARDS and sized.as_dict()["measured"] == FORWARDS
    assert "measured" not in LatencyModel(60.0, (1,), (100.0,), "ms").as_dict()  # no run, no key: old stores match
    with pytest.raises(LatencyError, match="'measured' must be the run record") as error:
        LatencyModel.from_dict({**model.as_dict(), "measured": "today"})
    assert "\n" not in str(error.value)


def test_the_priced_entry_and_the_docs_table_carry_the_run():
    pytest.importorskip("torch")
    pytest.importorskip("matplotlib")
    import dataclasses

    from tests.selector.test_verdict_priced import A2, FLAT, SEEDS, _cost, _fits, _setting
    from tests.test_generated_docs import GENERATE
    from verispec.selector.verdict import priced_entry, verdict_table

    setting = _setting()
    cost = dataclasses.replace(_cost(setting), measured=_verification("2026-11-30T15:06:00Z", "2026-11-30T15:11:00Z"))
    fits = _fits(setting, cost.per_action(setting.data.grid, setting.name), A2)
    forwards = verdict_table(setting, "cpu", FLAT, fits, SEEDS, resamples=50, seed=0)
    one = priced_entry(setting, "cpu", dataclasses.replace(FLAT, measured=FORWARDS), fits, SEEDS, forwards, cost,
                       resamples=50, seed=0)
    apart = priced_entry(setting, "cpu", FLAT, fits, SEEDS, forwards, cost, resamples=50, seed=0)
    assert one["run"]["one_run"] is True and apart["run"]["one_run"] is False
    assert one["cost"]["measured"] == cost.measured
    verdict = {"tables": [{**forwards, "priced": one}]}
    table = GENERATE.verdict_priced_table(lambda name: verdict)
    assert "`traversal` (forwards and verification timed in one run on AMD EPYC, 2026-11-30)" in table
    assert "the forwards' run unrecorded" in GENERATE.verdict_priced_table(
        lambda name: {"tables": [{**forwards, "priced": apart}]})
