"""The names and limits the command line's parser shows, in one module of the standard library only: ``verispec
--help`` builds every command's parser from them without importing numpy, and the module that enforces each one
imports it from here (the owner is named beside each)."""

from __future__ import annotations

#: Largest tree parameter (and depth) accepted: far beyond any tree an exact analysis can handle, small enough that
#: sizes computed from it stay ordinary integers (``verispec.simulator.drafters``).
MAX_TREE_PARAMETER = 10**6

#: The exact engine's methods (``verispec.simulator.engine.analyze``).
METHODS = ("auto", "closed-form", "enumerate", "dp", "dp-metrics", "fast-enumeration", "rule-dp")

#: One form per tree kind (the text before the colon names the kind), in the order --help and
#: ``verispec.simulator.tree_specs.TREE_KINDS`` list them.
TREE_FORMS = ("chain:L", "iid:K,L", "delayed:K,L1,L2", "branch:b1,b2,...", "branch-iid:b1,b2,...", "hub",
              "hub-tree:L", "greedy:K", "greedy-tree:K,L", "dyspec:N", "argmax-chain:L", "topk-chain:k,L",
              "ddtree:B,L")

#: Execution backends of grid builds (``verispec.study.executor.execute``; --backend of sweep, report and
#: selector dataset).
BACKENDS = ("serial", "local", "dask", "ray")

#: TV distance above which a problem is a witness that a rule is lossy (``verispec.hunt``, and check-external's
#: exact results, ``verispec.external.check``).
DEFAULT_THRESHOLD = 1e-9
#: The penalties the ``step-penalties`` layout checks when none is given (``verispec.models.penalties``): every
#: penalty on, each large enough to move a small vocabulary's law far past any threshold.
DEFAULT_PENALTIES = "repetition=1.5,frequency=0.5,presence=0.25"

#: Restricted classes of verifiers the multi-step LP can optimise over (``verispec.bounds.multistep``; None: every
#: valid verifier).
RESTRICTIONS = ("selected-path",)

#: The layouts of verification code written elsewhere, in the order of ``verispec.external.layouts.LAYOUTS``.
EXTERNAL_LAYOUTS = ("chain", "padded", "ragged", "tree-parent", "tree-sibling", "transformers", "gpt-fast", "step",
                    "step-ragged", "step-tree", "step-penalties")

#: Largest number of runs of one black-box test: the runs' tree indices and outcomes are held in memory, 16 bytes
#: each (``verispec.external.blackbox``; check-external's --samples).
MAX_BLACKBOX_SAMPLES = 20_000_000
#: The most distinct keys (seeds of keyed random streams) one call of code under check may draw from, by default
#: (``check-external --max-keys``): each key is a stream of uniforms of its own to integrate.
MAX_KEYS = 4096
#: How ``check-external --rng capture`` feeds draws from keyed sources (``verispec.external.rng.KEY_MODES``).
KEY_MODES = ("keyed", "fresh")

#: Most nodes (root included) of a tree decoded: every target forward feeds the whole tree with an n x (context + n)
#: attention mask, and the verifier's law holds n x V float64 entries. Sequoia's and DySpec's largest trees have
#: 768 nodes; iid:99999,2 (200,000 nodes) was built and forwarded with no estimate (``verispec.models.decoding``;
#: the largest size of 'latency --sizes').
MAX_DECODE_NODES = 4096

#: t_p / t_q of sweeps when no latency model is given: one target forward costs this many draft steps
#: (``verispec.study.grid.DEFAULT_LATENCY``; sweep's --cost-ratio).
DEFAULT_COST_RATIO = 4.0

#: Widest hidden-state projection of a selector network ('selector train --projection', 'selector study
#: --projection'): the paper's is 128, Qwen2.5 1.5B's states 1,536 wide.
MAX_PROJECTION = 4096

#: Largest --context-file read: the pairs verispec installs take at most 32,768 tokens of context (Qwen2.5's
#: max_position_embeddings), about 128 KiB of text at 4 bytes a token; 4 MiB leaves room for any tokenizer.
MAX_CONTEXT_FILE_BYTES = 4 << 20

#: Largest --prompts file read: 16 prompts of the longest context, or thousands of ordinary ones.
MAX_PROMPTS_FILE_BYTES = 64 << 20

#: Largest --max-vocab of 'hunt': context-dependent candidates have V^(L+1) conditionals each, and every
#: candidate is analysed exactly.
MAX_HUNT_VOCAB = 10

#: Largest token count of a context the models see (decode --max-new-tokens, latency --context-length): Qwen2.5's
#: max_position_embeddings, the longest context of the pairs verispec installs. A static cache holds this many
#: slots per layer, allocated at once (--max-new-tokens 10^12 asked for a terabyte).
MAX_CONTEXT_TOKENS = 32_768

#: Largest --repeats of 'latency': each repeat is one timed forward per size; the median of a thousand is as
#: steady as a median gets.
MAX_LATENCY_REPEATS = 1000

#: Largest --threads: torch sets up per-thread state for every thread asked for at once (--threads 10^9 asked for
#: 88 GB); no machine verispec runs on has more cores than this.
MAX_THREADS = 1024

#: torch's CPU threads of the selector study by default (``verispec.selector.study.study_threads``, which says why).
STUDY_THREADS = 1

#: Largest --max-variables of 'bound': HiGHS indexes an LP's columns with 32-bit integers.
MAX_LP_VARIABLES = 2**31 - 1

#: Seconds an exact (rational) analysis may take, by estimate and as it runs, when no longer --time-budget is given:
#: the default budget of 'exact --exact' (``verispec.cli.options.command_budget``), the engine's refusal before
#: anything is built (``verispec.simulator.engine.check_rational_cost``) and psbv's watch over its splits
#: (``verispec.verifiers.psbv``). Size checks count float operations; rationals cost 20 to over 2,000 times more
#: and grow as they run.
MAX_RATIONAL_SECONDS = 300.0

#: Default seconds each check of 'check-engine' may take (exact mode on vLLM's V1 step at V = 3 takes about 80 s on 2
#: cores; ``verispec.engines.check``, and the pytest plugin's engine checks).
DEFAULT_CHECK_BUDGET = 600.0
