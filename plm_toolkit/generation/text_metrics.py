"""Metrics over generated text: corpus BLEU and chrF through sacrebleu (Post 2018), and exact match.

sacrebleu tokenizes the detokenized hypotheses and references itself (13a for BLEU), so its scores are comparable
across papers and toolkits, and its *signature* records every setting that changes the number
(``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.x``). It is an optional dependency
(``pip install plm_toolkit[translation]``); asking for BLEU without it stops with that advice.
"""

from __future__ import annotations

from collections.abc import Sequence

from plm_toolkit.core.errors import ConfigError


def _sacrebleu():
    try:
        import sacrebleu
    except ImportError:
        raise ConfigError(
            "BLEU and chrF need sacrebleu: pip install 'plm_toolkit[translation]' (or pip install sacrebleu)"
        ) from None
    return sacrebleu


def bleu_chrf(hypotheses: Sequence[str], references: Sequence[str], tokenize: str = "13a") -> dict[str, float | str]:
    """Corpus BLEU and chrF of the hypotheses against one reference each, with sacrebleu's signatures:
    ``{"bleu": .., "chrf": .., "bleu_signature": .., "chrf_signature": ..}``."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    sacrebleu = _sacrebleu()
    bleu = sacrebleu.metrics.BLEU(tokenize=tokenize)
    chrf = sacrebleu.metrics.CHRF()
    refs = [list(references)]
    bleu_score = bleu.corpus_score(list(hypotheses), refs)
    chrf_score = chrf.corpus_score(list(hypotheses), refs)
    return {
        "bleu": float(bleu_score.score),
        "chrf": float(chrf_score.score),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def exact_match(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Share of hypotheses equal to their reference after stripping surrounding whitespace."""
    if not references:
        return 0.0
    same = sum(h.strip() == r.strip() for h, r in zip(hypotheses, references, strict=True))
    return same / len(references)
