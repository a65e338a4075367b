"""A planted bug in transformers' shipped assisted generation, the negative control of ``check-engine
transformers`` (``tests/engines/test_transformers_engine.py``): the candidate generator hands back the assistant's
RAW logits as ``candidate_logits`` while its drafts come from the processed scores, the class of transformers
#47932. Everything else is the installed release's ``generate``, as ``verispec.engines.transformers_step`` runs it;
the patch is undone after every call."""

from verispec.engines.transformers_step import assisted_generate


def raw_candidate_logits(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p, min_p,
                         seed):
    """``assisted_generate`` with ``AssistedCandidateGenerator.get_candidates`` returning the assistant's raw logits
    at the candidates' positions in place of the processed scores it drafted from (``step`` layout)."""
    from transformers.generation import candidate_generator

    shipped = candidate_generator.AssistedCandidateGenerator.get_candidates

    def planted(self, ids, *args, **kwargs):
        candidates, logits = shipped(self, ids, *args, **kwargs)
        if logits is None or logits.shape[1] == 0:
            return candidates, logits
        drafted = logits.shape[1]
        raw = self.assistant_model(candidates).logits[:, -drafted - 1:-1]
        return candidates, raw.to(logits.dtype)

    candidate_generator.AssistedCandidateGenerator.get_candidates = planted
    try:
        return assisted_generate(draft_model, target_model, input_ids, num_draft_tokens, temperature, top_k, top_p,
                                 min_p, seed)
    finally:
        candidate_generator.AssistedCandidateGenerator.get_candidates = shipped
