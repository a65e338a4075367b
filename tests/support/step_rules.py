"""Whole steps in the three step layouts (``verispec.external.step``), each a correct twin and a broken one.

Each drafts from the draft model's logits under the requested sampling, draws with torch generators seeded by
the request's seed and a position (keys read by verispec), and verifies with Leviathan et al.'s token-level rule
(chains) or SpecInfer's multi-round rule (Miao et al. 2024, Algorithm 2: each child in turn accepted with
min(1, p/q), the residual (p - q)+ taking p's place after a rejection; trees). The broken twins carry the bugs of
the issue's classes: the raw q handed to the verifier while drafts come from the processed one (transformers
#47932), the sampling settings applied to the bonus token only (vLLM #42802), an offset that reads another
request's rows (ragged), and the residual left un-updated between siblings (trees).
"""

from __future__ import annotations

import torch

NEG = float("-inf")


def processed(logits, temperature, top_k, top_p, min_p):
    """Temperature, top-k, top-p, min-p in transformers' order (float64): the law a request asks for."""
    if temperature == 0:
        return torch.nn.functional.one_hot(torch.argmax(logits), logits.shape[-1]).to(torch.float64)
    scores = logits / temperature
    if top_k > 0:
        kth = torch.topk(scores, min(int(top_k), scores.shape[-1])).values[..., -1, None]
        scores = scores.masked_fill(scores < kth, NEG)
    if top_p < 1.0:
        ordered, index = torch.sort(scores, descending=False)
        drop = ordered.softmax(-1).cumsum(-1) <= 1 - top_p
        drop[..., -1:] = False
        scores = scores.masked_fill(drop.scatter(-1, index, drop), NEG)
    if min_p > 0:
        probs = scores.softmax(-1)
        scores = scores.masked_fill(probs < min_p * probs.max(-1, keepdim=True).values, NEG)
    return scores.softmax(-1)


def _draw(law, generator, key):
    """One token from ``law`` by torch.multinomial, with ``generator`` seeded by ``key``; argmax for a point mass."""
    if law.max() == 1.0:
        return int(torch.argmax(law))
    generator.manual_seed(key)
    return int(torch.multinomial(law, 1, generator=generator))


def _uniform(generator, key):
    generator.manual_seed(key)
    return float(torch.rand(1, dtype=torch.float64, generator=generator))


def _chain(draft_model, target_model, ids, count, settings, seed, *, raw_q=False, bonus_only=False, row_offset=0):
    """One request's step on a chain of ``count`` drafts; ``ids`` [1, P]. Returns the emitted tokens (a list)."""
    prompt = ids.shape[1]
    generator = torch.Generator()
    drafts, laws, raw = [], [], []
    for i in range(count):
        logits = draft_model(ids)[0, -1]
        law = processed(logits, *settings)
        drafts.append(_draw(law, generator, seed * 4096 + i))
        laws.append(law)
        raw.append(logits.softmax(-1))
        ids = torch.cat([ids, torch.tensor([[drafts[-1]]])], dim=1)
    scores = target_model(ids)[0, prompt - 1:]
    plain = (1.0, 0, 1.0, 0.0) if settings[0] > 0 else settings
    out = []
    for i, x in enumerate(drafts):
        p = processed(scores[i + row_offset], *(plain if bonus_only else settings))
        q = raw[i] if raw_q else laws[i]
        if settings[0] == 0:  # greedy: accept while the draft is the target's argmax
            if x == int(torch.argmax(scores[i])):
                out.append(x)
                continue
            return out + [int(torch.argmax(scores[i]))]
        if _uniform(generator, seed * 4096 + 1000 + i) * q[x] < p[x]:
            out.append(x)
            continue
        residual = torch.clamp(p - q, min=0)
        return out + [_draw(residual / residual.sum(), generator, seed * 4096 + 2000 + i)]
    return out + [_draw(processed(scores[count], *settings), generator, seed * 4096 + 3000)]


def step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    return torch.tensor(_chain(draft_model, target_model, input_ids, num_draft_tokens,
                               (temperature, top_k, top_p, min_p), seed))


def step_raw_q(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    """Broken: drafts from the processed q, the raw q handed to the verifier (transformers #47932's class)."""
    return torch.tensor(_chain(draft_model, target_model, input_ids, num_draft_tokens,
                               (temperature, top_k, top_p, min_p), seed, raw_q=True))


def step_bonus_only(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    """Broken: the sampling settings honoured by the bonus token only (vLLM #42802's class: the verified tokens
    see the target at temperature 1 and no filter)."""
    return torch.tensor(_chain(draft_model, target_model, input_ids, num_draft_tokens,
                               (temperature, top_k, top_p, min_p), seed, bonus_only=True))


def step_row_offset(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    """Broken: draft i is verified against the target's row after it (index i + 1), not the row before it: the
    same numbers on a context-free problem, another law wherever the law depends on the context."""
    return torch.tensor(_chain(draft_model, target_model, input_ids, num_draft_tokens,
                               (temperature, top_k, top_p, min_p), seed, row_offset=1))


def _ragged(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds,
            shift=0, one_seed=False):
    count = len(num_draft_tokens)
    width = int(num_draft_tokens.max()) + 1
    out = torch.full((count, width), -1, dtype=torch.int64)
    for request in range(count):
        source = (request + shift) % count  # shift != 0: a request reads another's settings (an offset bug)
        settings = (float(temperature[source]), int(top_k[source]), float(top_p[source]), float(min_p[source]))
        emitted = _chain(draft_model, target_model, input_ids[request:request + 1], int(num_draft_tokens[request]),
                         settings, int(seeds[0 if one_seed else request]))
        out[request, :len(emitted)] = torch.tensor(emitted)
    return out


def ragged_step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds):
    return _ragged(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds)


def ragged_step_shifted(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p,
                        seeds):
    """Broken: each request reads the next request's sampling settings (an offset into the per-request arrays)."""
    return _ragged(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds,
                   shift=1)


def ragged_step_one_seed(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p,
                         seeds):
    """Broken: every request draws from the first request's seed (one key shared across the batch): each request's
    own law is right, but requests that sample draw the same numbers."""
    return _ragged(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seeds,
                   one_seed=True)


def _tree(draft_model, target_model, input_ids, parents, settings, seed, *, keep_residual=True):
    """SpecInfer's multi-round rule on a static tree whose siblings are drawn i.i.d. from q at their parent."""
    generator = torch.Generator()
    nodes = len(parents) + 1
    tokens, paths = [None] * nodes, [()] * nodes
    children = [[] for _ in range(nodes)]
    for node, parent in enumerate(parents.tolist(), start=1):
        children[parent].append(node)
    draft_law = {}
    for node in range(1, nodes):  # a parent is before its children
        parent = int(parents[node - 1])
        if parent not in draft_law:
            ids = torch.cat([input_ids, torch.tensor([list(paths[parent])], dtype=torch.int64)], dim=1)
            draft_law[parent] = processed(draft_model(ids)[0, -1], *settings)
        tokens[node] = _draw(draft_law[parent], generator, seed * 4096 + node)
        paths[node] = (*paths[parent], tokens[node])
    node, out = 0, []
    while True:
        ids = torch.cat([input_ids, torch.tensor([list(paths[node])], dtype=torch.int64)], dim=1)
        p = processed(target_model(ids)[0, -1], *settings)
        for child in children[node]:
            q = draft_law[node]
            x = tokens[child]
            if _uniform(generator, seed * 4096 + 1000 + child) * q[x] < p[x]:
                out.append(x)
                node = child
                break
            if keep_residual:
                residual = torch.clamp(p - q, min=0)
                p = residual / residual.sum()
        else:
            return torch.tensor(out + [_draw(p, generator, seed * 4096 + 3000 + node)])


def tree_step(draft_model, target_model, input_ids, parents, temperature, top_k, top_p, min_p, seed):
    return _tree(draft_model, target_model, input_ids, parents, (temperature, top_k, top_p, min_p), seed)


def tree_step_stale_residual(draft_model, target_model, input_ids, parents, temperature, top_k, top_p, min_p, seed):
    """Broken: after a rejected sibling the next sibling is tested against p again, not the residual."""
    return _tree(draft_model, target_model, input_ids, parents, (temperature, top_k, top_p, min_p), seed,
                 keep_residual=False)


def _models_problem(draft_model, target_model, input_ids, settings, depth):
    """A verispec problem whose conditionals are the models' logits after the request's settings (verispec's own
    transform), up to prefix length ``depth`` (target) and ``depth - 1`` (draft). Each row is computed when the
    drafter or the rule first asks for it (a chain:1 step reads 3 of the 17 rows a full table at V = 3 holds, and
    tabulating them all was most of the step's time), and checked as a table's row is (``as_distribution``)."""
    from verispec.models.sampling import Sampling
    from verispec.simulator.distributions import as_distribution
    from verispec.simulator.problems import Problem

    temperature, top_k, top_p, min_p = settings
    sampling = Sampling(float(temperature), int(top_k) or None, None if top_p >= 1 else float(top_p),
                        float(min_p) or None)

    class ModelsProblem(Problem):
        vocab_size = int(target_model(input_ids).shape[-1])
        exact = False
        horizon = depth

        def __init__(self):
            self.rows = {}

        def _row(self, model, name, prefix, longest):
            prefix = tuple(int(token) for token in prefix)
            if len(prefix) > longest or not all(0 <= token < self.vocab_size for token in prefix):
                raise KeyError(f"no {name} row at prefix {prefix}")
            if (name, prefix) not in self.rows:
                ids = torch.cat([input_ids, torch.tensor([list(prefix)], dtype=torch.int64)], dim=1)
                self.rows[name, prefix] = as_distribution(sampling.probabilities(model(ids)[0, -1].numpy()),
                                                          name=f"{name} at {prefix}", size=self.vocab_size)
            return self.rows[name, prefix]

        def target(self, prefix):
            return self._row(target_model, "target", prefix, depth)

        def draft(self, prefix):
            return self._row(draft_model, "draft", prefix, depth - 1)

    return ModelsProblem()


def own_rule_step(rule: str, tree_of=lambda count: f"chain:{count}"):
    """A whole step made of verispec's own parts: its drafter draws the tree and its registered rule ``rule``
    verifies it as a procedure, both choosing through a numpy Generator seeded by the request's seed (a keyed
    stream), on the problem the models give under the request's settings. Lossless for every lossless rule."""
    import numpy as np

    from verispec.simulator.chooser import RandomChooser
    from verispec.simulator.tree_specs import parse_tree
    from verispec.verifiers import get_verifier

    def step(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
        drafter = parse_tree(tree_of(int(num_draft_tokens)))
        problem = _models_problem(draft_model, target_model, input_ids, (temperature, top_k, top_p, min_p),
                                  drafter.depth + 1)
        chooser = RandomChooser(np.random.default_rng(int(seed)))
        tree = drafter.sample(problem, chooser.rng)
        node, token = get_verifier(rule).procedure(tree, chooser)
        return torch.tensor([*tree.paths[node], token])

    step.__name__ = f"own_{rule}_step"
    return step


#: Uniforms compared a token by ``many_thresholds``: their joint integration is far beyond a short budget.
THRESHOLD_UNIFORMS = 10


def _from_the_largest(target_model, input_ids, num_draft_tokens, temperature, power):
    """K + 1 tokens of the target (drafts ignored), each by the inverse CDF at max(u_1..u_n) ** power."""
    ids, out = input_ids, []
    for _ in range(int(num_draft_tokens) + 1):
        law = torch.softmax(target_model(ids)[0, -1] / float(temperature), -1)
        largest = torch.rand(THRESHOLD_UNIFORMS, dtype=torch.float64).max()
        token = int(torch.searchsorted(torch.cumsum(law, 0), largest ** power).clamp(max=len(law) - 1))
        out.append(token)
        ids = torch.cat([ids, torch.tensor([[token]])], 1)
    return out


def many_thresholds(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p, seed):
    """The target's law from the largest of n uniforms: P(max <= x) = x^n, so max ** n is uniform. Every token is a
    threshold test on each of the n uniforms, so exact mode integrates n dimensions a token."""
    return _from_the_largest(target_model, input_ids, num_draft_tokens, temperature, THRESHOLD_UNIFORMS)


def many_thresholds_biased(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p,
                           seed):
    """The broken twin: the largest uniform itself, which leans to the last tokens (P(max <= x) = x^n)."""
    return _from_the_largest(target_model, input_ids, num_draft_tokens, temperature, 1)
