"""vLLM's rejection sampler, checked exactly by verispec in vLLM's own test suite (docs/guides/engine_ci.md).

The installed release's shipped sampler runs unmodified on the CPU, under Triton's interpreter, in a process of its
own; a test fails unless the check gets the verdict a correct release gets, with the witness in its message.
"""

import importlib.util

import pytest

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed: pip install --no-deps -r verispec/engines/requirements/vllm.txt",
                allow_module_level=True)


def test_greedy_and_seeded_requests_keep_the_target_law(verispec_check):
    # one child process, one problem (V = 2, one draft): every draft list of chain:1 in one all-greedy batch, each
    # request held to the target's argmax, and the exact law of a seeded request's whole step within vLLM's float32
    # threshold, 1e-6
    result = verispec_check.engine("vllm", checks=["v1-greedy", "v1-seeded"], target=[0.6, 0.4], draft=[0.3, 0.7])
    greedy, seeded = result["checks"]
    assert result["exit_status"] == 0
    assert greedy["verdict"] == "LOSSLESS" and greedy["mode"] == "exhaustive"
    assert seeded["verdict"] == "LOSSLESS" and seeded["mode"] == "exact" and seeded["tv_distance"] < 1e-6
