"""A planted bug in mlx-lm's shipped speculative decoding, the negative control of ``check-engine mlx-lm``
(``tests/engines/test_mlx_lm_engine.py``): a copy of the installed ``mlx_lm/generate.py`` whose verification reads
the draft's token where it should read the target's sample (``tn = tokens[n]`` becomes ``tn = draft_tokens[n]``), so
every draft is kept. The copy is made in memory from the installed file's text; the installed files are not
changed."""

import importlib
import sys
import types

from verispec.engines.mlx_lm_step import run_step

SHIPPED_TEST = "tn, dtn, lpn = tokens[n], draft_tokens[n], logprobs[n]"
PLANTED_TEST = "tn, dtn, lpn = draft_tokens[n], draft_tokens[n], logprobs[n]"


def _planted_step():
    name = "mlx_lm.generate_planted"
    if name not in sys.modules:
        shipped = importlib.import_module("mlx_lm.generate")
        with open(shipped.__file__, encoding="utf-8") as stream:
            text = stream.read()
        assert text.count(SHIPPED_TEST) == 1, "mlx-lm's verification test moved"
        module = types.ModuleType(name)
        module.__package__, module.__file__ = "mlx_lm", shipped.__file__
        exec(compile(text.replace(SHIPPED_TEST, PLANTED_TEST), shipped.__file__, "exec"), module.__dict__)
        sys.modules[name] = module
    return sys.modules[name].speculative_generate_step


def keeps_every_draft(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    """The adapter's step with the planted ``speculative_generate_step`` (``step`` layout)."""
    return run_step(_planted_step(), draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k,
                    top_p, min_p, seed)
