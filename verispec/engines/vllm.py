"""vLLM's shipped rejection sampler, checked unmodified on the CPU through Triton's interpreter.

vLLM's V1 ``RejectionSampler`` (``vllm/v1/sample/rejection_sampler.py``) verifies every request of a batch in Triton
kernels: ``rejection_random_sample_kernel`` accepts a draft x when ``p(x) / q(x) >= u`` with u from
``generate_uniform_probs`` (float64 ``torch.rand``, each seeded request's own ``torch.Generator``),
``sample_recovered_tokens_kernel`` draws the recovered token as ``argmax((p - q)+ * inv_q)`` with
``inv_q = 1 / q.exponential_()`` (one noise row per request), and the bonus token comes from the regular
``Sampler``. Under ``TRITON_INTERPRET=1`` those kernels run on the CPU in numpy, unmodified; with
``CUDA_VISIBLE_DEVICES=""`` vLLM's ``triton_utils`` keeps Triton on although no driver is active. verispec feeds
every draw (``torch.rand``, ``uniform_``, ``exponential_``, generators read by their seeds) and reads the kernel's
race as one categorical draw (``verispec.external.rng.triton_races``), so the law of a whole step is exact.

The step functions (``verispec.engines.vllm_v1``, imported only where the engine's code runs) are in the ``step``
layout, one request alone in its batch, and the ``step-ragged`` layout (``verispec.external.step``): three requests,
request 1 checked with the requested sampling and its seed, requests 0 and 2 greedy with 1 and 0 drafts. Each drafts its
requests from the draft model's raw logits (q = softmax(logits / T), a draw from the request's generator, or the
argmax for an n-gram-like proposer without draft probabilities), scores them with the target model, builds vLLM's
own ``SpecDecodeMetadata`` and ``SamplingMetadata`` and calls ``RejectionSampler.forward``. What is vLLM's and what
is verispec's: the drafting is verispec's (it stands for the proposer, whose law the check assumes: the q handed
over is the law the draft was drawn from); metadata, logits processing (temperature, top-k, top-p), the three
kernels, the bonus sampler and every draw are vLLM's.

``VERISPEC_ENGINE_SOURCE=FILE`` loads FILE as ``vllm.v1.sample.rejection_sampler`` in place of the installed
module (a mutant of the shipped file, or a planted bug, checked the same way); the installed files are never
changed.
"""

from __future__ import annotations

from verispec.engines import Check, EngineError
from verispec.models.penalties import DEFAULT_PENALTIES, Penalties

PACKAGE = "vllm"
#: Releases whose entry points this adapter has read and checked (``experiments/engine_releases.py`` checks each):
#: every release the registry lists from 0.20.0 to 0.33.0, the V2 runner's in each.
SUPPORTED = ("0.20.0", "0.20.1", "0.20.2", "0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1",
             "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")
#: The exact TV above which a check is LOSSY. vLLM verifies in float32 (target and draft probabilities, their
#: ratio, softmax), so a correct release's law sits within float32 rounding of the target, not float64's: at
#: V = 3, p = (0.5, 0.3, 0.2), q = (0.2, 0.2, 0.6) its exact TV is 1.3e-8 (the float64 threshold of 1e-9 would
#: call it lossy). 1e-6 is about 16 float32 unit roundoffs; every vLLM bug of the zoo moves the law by 1e-2 or
#: more, while a loss below 1e-6 (SGLang #35771's 3.6e-8 class) is not seen at this threshold.
THRESHOLD = 1e-6
#: The module whose source ``VERISPEC_ENGINE_SOURCE`` replaces.
SAMPLER_MODULE = "vllm.v1.sample.rejection_sampler"
SOURCE_VARIABLE = "VERISPEC_ENGINE_SOURCE"
_V1 = "verispec.engines.vllm_v1"
_V2 = "verispec.engines.vllm_v2"

#: The requests' sampling settings the adapter can hand vLLM (``--sampling``), off values as in the step layouts.
_VOCAB_FOR_TOP_K_OFF = 0


def release() -> str:
    """The installed vLLM's release; EngineError when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        raise EngineError(f"vLLM is not installed: pip install --no-deps vllm=={SUPPORTED[-1]} and the modules its "
                          "sampler imports (verispec/engines/requirements/vllm.txt); verispec's adapter knows "
                          f"releases {supported_range()}") from None


def supported_range() -> str:
    return f"{SUPPORTED[0]} to {SUPPORTED[-1]}"


def check_release(found: str | None = None, *, any_release: bool = False) -> str:
    """The installed release when the adapter knows it (or ``any_release``: whatever it is, its entry points still
    verified where the checks load them); EngineError naming the supported releases otherwise."""
    found = found or release()
    if found not in SUPPORTED and not any_release:
        raise EngineError(f"vLLM {found} is not a release verispec's adapter knows (it knows {supported_range()}): "
                          "its entry points may have moved; install a supported release")
    return found


#: FLy's setting in the ``v2-fly`` check: a window of one native acceptance (the shortest; vLLM's default is 6, longer
#: than the check's drafts), vLLM's default entropy threshold (0.3 nats) over the target's top 3 tokens.
FLY = {"fly_window_size": 1, "fly_entropy_threshold": 0.3, "fly_entropy_top_k": 3}
#: verispec's own FLy (``verispec.verifiers.fly``) at that setting: the law the FLy checks must emit.
FLY_RULE = f"fly(theta={FLY['fly_entropy_threshold']:g},window={FLY['fly_window_size']})"
#: ``v1-synthetic``: vLLM's synthetic acceptance rates (unconditional, by position), and verispec's rule at them.
SYNTHETIC_RATES = (0.7, 0.4)
SYNTHETIC_RULE = f"synthetic(a1={SYNTHETIC_RATES[0]:g},a2={SYNTHETIC_RATES[1]:g})"
FLY_WHY = ("FLy (arXiv 2511.22972) accepts a rejected draft when the target is undecided and the next drafts pass: "
           "lossy by design, and checked against verispec's own fly rule at the same setting")
#: ``v2-adaptive``: verispec's stand-in for the drafter's confidence head, the probability that a draft slot is
#: accepted, read from the token before the slot (DSpark's ``compute_confidence`` reads the slot's hidden state and
#: ``markov_embed`` of the previous token), indexed by token id modulo its length; and a greedy neighbour's
#: per-slot confidence. With the step layouts' prompt of zeros and two drafts each, vLLM's budget (all slots but
#: one) drops the checked request's second slot exactly when its first draft is token 1 (survival 0.9 x 0.3 below
#: the neighbour's 0.7 x 0.7): the checked request's draft length depends on what it drafted. Stated here, beside
#: the checks, so that they are read without importing vLLM (``verispec.engines.vllm_v2`` drives them).
ADAPTIVE_CONFIDENCE = (0.9, 0.3, 0.6)
NEIGHBOUR_CONFIDENCE = 0.7
#: ``v2-lilicorr``: verispec's stand-in for the pairwise head of DFlash2 and LiLiCorr, the score added to a candidate
#: token's unary logit given the candidate drawn at the position before it (indexed by token ids modulo its size):
#: a draft that favours repeating its previous token, so each position's draft law depends on the draft before it.
LILICORR_COUPLING = ((0.8, -0.4, -0.4), (-0.4, 0.8, -0.4), (-0.4, -0.4, 0.8))


def _method_checks(v1: str) -> list[Check]:
    """The V1 sampler's rejection methods that are lossy by design, each against verispec's own rule."""
    return [
        Check("v1-fly", v1, f"{_V1}:v1_single_fly", "v1-seeded with FLy, window 1, entropy threshold 0.3 over the "
              "top 3 (release 0.33 on), against verispec's own rule, V = 2", layout="step", tree="chain:2",
              target=(0.6, 0.4), draft=(0.3, 0.7), expect="lossy", since="0.33.0", reference=FLY_RULE, why=FLY_WHY),
        Check("v1-synthetic", v1, f"{_V1}:v1_single_synthetic", "v1-seeded with synthetic acceptance at rates "
              f"{SYNTHETIC_RATES} by position (release 0.33 on), against verispec's own rule, V = 2", layout="step",
              tree="chain:2", target=(0.6, 0.4), draft=(0.3, 0.7), expect="lossy", since="0.33.0",
              reference=SYNTHETIC_RULE, why="synthetic acceptance (rejection_sample_method 'synthetic') accepts "
              "drafts at set rates whatever the target says, to benchmark: lossy by design, and checked against "
              "verispec's own synthetic rule at the same rates"),
        Check("v1-synthetic-greedy", v1, f"{_V1}:v1_single_synthetic_greedy", "v1-synthetic for a greedy request "
              "(vLLM's greedy kernel's synthetic branch, which a sampling request never reaches), on point masses: "
              "the target's argmax token 1, the draft's token 0 (greedy decoding and sampling have one law there), "
              "against verispec's own rule, V = 2", layout="step", tree="chain:2", target=(0.0, 1.0),
              draft=(1.0, 0.0), expect="lossy", since="0.33.0", reference=SYNTHETIC_RULE,
              why="synthetic acceptance in a greedy batch accepts drafts at the set rates and emits the target's "
              "argmax at the first rejection: lossy by design, checked against verispec's own synthetic rule"),
    ]


def _seeds_check(v1: str) -> Check:
    """Seeded requests replayed (``verispec.engines.seeds``): what no law check sees."""
    return Check("v1-seeds", v1, f"{_V1}:v1_step_seeded",
                 "three sampling requests, each with its own seed (step-ragged's 1, K and 0 drafts): each request's "
                 "tokens the same whenever its seed is kept, the others' seeds and torch's global generator changed "
                 "(vLLM's generate_uniform_probs: 'the requests with their own seeds will use the provided "
                 "torch.Generator for reproducibility'), V = 2", target=(0.6, 0.4), draft=(0.3, 0.7), seeds=True,
                 expect="reproducible")


def _offset_checks(v1: str) -> list[Check]:
    """The V1 checks built to see a row read or written at another request's offset or at another position: on the
    context twin as well, where each position's laws differ (``verispec.external.step_context``)."""
    return [
        Check("v1-behind", v1, f"{_V1}:v1_behind_greedy",
              "v1-seeded, the request second in its batch behind a greedy request with two drafts (its rows start at "
              "2, and the output's stride is 3, not its own 2), on the context twin as well, V = 2: a row read or "
              "written at another request's offset moves the law", layout="step", target=(0.6, 0.4),
              draft=(0.3, 0.7), context_twin=True),
        Check("v1-positions", v1, f"{_V1}:v1_single_seeded",
              "v1-seeded with two drafts on the context twin as well (each position's laws differ there), V = 2: a "
              "position's row read at another position (its recovered token, its draft or target probabilities) "
              "moves the law", layout="step", tree="chain:2", target=(0.6, 0.4), draft=(0.3, 0.7), context_twin=True),
    ]


def checks() -> list[Check]:
    """vLLM's verification entry points in the configurations the adapter checks."""
    v1 = "V1 RejectionSampler.forward"
    min_p_why = ("vLLM loads no min-p processor when speculative decoding is on and warns 'min_p and logit_bias "
                 "parameters won't work with speculative decoding' (vllm/v1/sample/logits_processor/__init__.py)")
    v2 = "V2 gumbel_sample + rejection_sample"
    v2_why = ("vLLM #47386: the draft's Gumbel noise and the resample's share the key (seed, position), so the "
              "resample races the noise that chose the rejected draft; #54282 salts the draft's positions (0.29)")
    return [
        Check("v1-seeded", v1, f"{_V1}:v1_single_seeded",
              "probabilistic drafts with draft probs, the request seeded (its own torch.Generator)", layout="step"),
        _seeds_check(v1),
        Check("v1-unseeded", v1, f"{_V1}:v1_single_unseeded",
              "probabilistic drafts with draft probs, no request seed (torch's global generator)", layout="step"),
        Check("v1-ngram", v1, f"{_V1}:v1_single_ngram",
              "drafts without draft probs (an n-gram proposer: the draft model's argmax, token 1: neither end of the "
              "vocabulary, so a recovery that leaves out more than the draft token shows)", layout="step",
              draft=(0.2, 0.6, 0.2)),
        Check("v1-temperature", v1, f"{_V1}:v1_single_seeded", "temperature 0.7", layout="step",
              sampling="temperature=0.7"),
        Check("v1-mixed", v1, f"{_V1}:v1_step_seeded",
              "a mixed batch: the checked request between greedy requests of 1 and 0 drafts (step-ragged), V = 2",
              target=(0.6, 0.4), draft=(0.3, 0.7)),
        *_offset_checks(v1),
        Check("v1-penalties", v1, f"{_V1}:v1_single_penalties",
              f"penalties: {Penalties.parse(DEFAULT_PENALTIES).describe()}, over the prompt and the request's "
              "earlier output, the drafts joining the output as they are verified (step-penalties), V = 2: two "
              "drafts without draft probs (the draft model's argmax, as v1-ngram), so the second position's "
              "penalties read the first draft", layout="step-penalties",
              tree="chain:2", target=(0.6, 0.4), draft=(0.3, 0.7)),
        Check("v1-penalties-ragged", v1, f"{_V1}:v1_ragged_penalties",
              "v1-penalties with one draft, the request second in its batch behind a greedy request that drafted "
              "nothing and has an earlier output of its own (vLLM skips the requests without drafts when it lines "
              "draft rows up with histories)", layout="step-penalties", tree="chain:1", target=(0.6, 0.4),
              draft=(0.3, 0.7)),
        Check("v1-top-k", v1, f"{_V1}:v1_single_seeded", "top-k 2", layout="step", sampling="temperature=1,top_k=2"),
        Check("v1-top-p", v1, f"{_V1}:v1_single_seeded", "top-p 0.75", layout="step",
              sampling="temperature=1,top_p=0.75"),
        Check("v1-allowed-ids", v1, f"{_V1}:v1_single_allowed_ids", "v1-seeded with allowed_token_ids leaving out "
              "token 2, which the problem gives no mass and the adapter gives the rows' largest logit: vLLM must ban "
              "it in every row", layout="step", target=(0.6, 0.4, 0.0), draft=(0.3, 0.3, 0.4)),
        Check("v1-bad-words", v1, f"{_V1}:v1_single_bad_words", "v1-allowed-ids with the one-token bad word [2] "
              "banning token 2 instead", layout="step", target=(0.6, 0.4, 0.0), draft=(0.3, 0.3, 0.4)),
        Check("v1-min-p", v1, f"{_V1}:v1_single_seeded", "min-p 0.5 (documented as not applied)", layout="step",
              sampling="temperature=1,min_p=0.5", expect="lossy", why=min_p_why),
        *_method_checks(v1),
        Check("v1-greedy", v1, f"{_V1}:v1_greedy_batch",
              "an all-greedy batch: every draft list of the tree against the target's argmax", exhaustive=True),
        Check("v1-logprobs", v1, f"{_V1}:v1_greedy_logprobs",
              "v1-greedy asking for logprobs (max_num_logprobs 1, raw_logprobs): every emitted token's "
              "log-probability and the largest, read by parse_output, against the target's", exhaustive=True),
        Check("v2-seeded", v2, f"{_V2}:v2_single",
              "the V2 runner: a draft by vLLM's Gumbel kernel, verified by its probabilistic rejection_sample "
              "(release 0.20 on)", layout="step", target=(0.59, 0.4, 0.01), draft=(0.35, 0.01, 0.64),
              why=v2_why, source_applies=False),
        Check("v2-block", v2, f"{_V2}:v2_block", "v2-seeded with use_block_verification (release 0.25 on)",
              layout="step", since="0.25.0", target=(0.59, 0.4, 0.01), draft=(0.35, 0.01, 0.64), why=v2_why,
              source_applies=False),
        Check("v2-adaptive", "V2 adaptive verification + rejection_sample", f"{_V2}:v2_adaptive",
              "adaptive verification (release 0.28 on): vLLM's _assign_draft_token_budget admits the best draft slots "
              "of the checked request and a greedy neighbour by survival, from confidences that read the drafted "
              "tokens (verispec stands for the confidence head), under a budget of all slots but one, V = 2",
              layout="step", tree="chain:2", target=(0.6, 0.4), draft=(0.3, 0.7), since="0.28.0",
              source_applies=False),
        Check("v2-lilicorr", "V2 candidate walk (DFlash2, LiLiCorr) + rejection_sample", f"{_V2}:v2_lilicorr",
              "the candidate walk of DFlash2 (release 0.28 on) and LiLiCorr (0.31 on): drafts drawn by vLLM's walk "
              "kernel from pairwise scores that read the candidate drawn before (verispec stands for the unary and "
              "pairwise heads), the q its cache kernel writes verified by rejection_sample; V = 3, where a "
              "resample that races the draft's noise shows (at V = 2 the residual of a rejected draft is one token)",
              layout="step", tree="chain:2", target=(0.59, 0.4, 0.01), draft=(0.35, 0.01, 0.64), since="0.28.0",
              why=v2_why, source_applies=False),
        Check("v2-fly", v2, f"{_V2}:v2_fly", "v2-seeded with FLy, window 1, entropy threshold 0.3 over the top 3 "
              "(release 0.33 on), against verispec's own rule", layout="step", tree="chain:2",
              target=(0.59, 0.4, 0.01), draft=(0.35, 0.01, 0.64), expect="lossy", source_applies=False, since="0.33.0",
              reference=FLY_RULE, why=FLY_WHY),
    ]


#: The padding of a row of ``SamplerOutput.sampled_token_ids`` (vllm/v1/outputs.py: "PLACEHOLDER_TOKEN_ID (-1 by
#: default) is used for padding"). Code outside the sampler's module relies on it: the model runner counts a request's
#: accepted tokens as its entries != -1 (``gpu_model_runner``), the n-gram proposer and the vocabulary mapping test
#: for -1. ``parse_output`` reads the module's own constant, so a sampler padding otherwise reads right through it.
PADDING = -1


class PaddingContractError(AssertionError):
    """vLLM's sampler wrote rows that break ``SamplerOutput``'s documented padding."""


def check_padding(sampled, vocab_size: int) -> None:
    """``sampled`` [B, max drafts + 1]: each row its emitted tokens (0 to V - 1), then ``PADDING`` to its end;
    PaddingContractError naming the first entry that is neither, or a token after the padding."""
    import torch

    rows = sampled.to(torch.int64)
    token = (rows >= 0) & (rows < vocab_size)
    padding = rows == PADDING
    wrong = ~(token | padding)
    if bool(wrong.any()):
        request, column = (int(i) for i in wrong.nonzero()[0])
        raise PaddingContractError(
            f"vLLM's sampler wrote {int(rows[request, column])} at request {request}, position {column} of "
            f"sampled_token_ids: neither a token of the vocabulary (0 to {vocab_size - 1}) nor the padding {PADDING} "
            "SamplerOutput documents, by which the model runner counts accepted tokens (vllm/v1/outputs.py)")
    after = (padding.cumsum(dim=1) > 0) & token
    if bool(after.any()):
        request, column = (int(i) for i in after.nonzero()[0])
        raise PaddingContractError(f"vLLM's sampler wrote the token {int(rows[request, column])} after the padding "
                                   f"{PADDING} at request {request}, position {column} of sampled_token_ids: a row is "
                                   "its tokens, then padding to its end (vllm/v1/outputs.py)")
