"""The model reorders the passages BM25 found for a question: which of them makes the question most likely?

Query likelihood (Sachan et al., 2022, "Improving Passage Retrieval with Zero-Shot Question Generation"): for each
candidate passage, the model reads "Passage: <text>\nA question about this passage:" and the mean log-probability of
the question's tokens after it is that passage's score. Words shared with the question are all BM25 sees; the model
also sees that "When was the study conducted?" fits "The survey was conducted from March to June 2010" better than a
passage that repeats "study". The candidates are read in one batch, without the document's cache (which is left
untouched), so the price is one forward over about K x 100 tokens per question (docs/quality.md has the figures).

The final order adds the two, BM25 scaled so the best candidate has 1, at BM25_WEIGHT, to the mean log-probability:
either alone did worse on the measurement set.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvqa.config import Decoding
from kvqa.model.loading import LoadedModel
from kvqa.prompt import in_chinese
from kvqa.results import QuestionTurn
from kvqa.timing import now

BM25_WEIGHT = 0.5


def _frame(question: str) -> tuple[str, str]:
    """The text around a passage, in the question's language."""
    if in_chinese(question):
        return "段落：", "\n关于这段的问题："
    return "Passage: ", "\nA question about this passage: "


def question_likelihood(lm: LoadedModel, passages: Sequence[str], question: str) -> list[float]:
    """Each passage's mean log-probability of the question's tokens after it, in one right-padded batch."""
    if not passages:
        return []
    head, tail = _frame(question)
    tokenizer = lm.tokenizer
    asked = tokenizer(question, add_special_tokens=False).input_ids
    if not asked:
        return [0.0] * len(passages)
    rows = [tokenizer(head + p + tail, add_special_tokens=False).input_ids for p in passages]
    width = max(len(r) for r in rows) + len(asked)
    ids = torch.zeros(len(rows), width, dtype=torch.long)  # (B, T); padding after each row's question
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        n = len(row) + len(asked)
        ids[i, :n] = torch.tensor(row + asked)
        mask[i, :n] = 1
    # the output layer only where a question token is predicted: over every position it costs about a fifth of the
    # forward (a 49k vocabulary on a 135M model)
    at = torch.stack([torch.arange(len(r) - 1, len(r) - 1 + len(asked)) for r in rows]).to(lm.device)  # (B, Q)
    with torch.no_grad():
        hidden = lm.model.base_model(input_ids=ids.to(lm.device), attention_mask=mask.to(lm.device),
                                     use_cache=False).last_hidden_state  # (B, T, D)
        logits = lm.model.get_output_embeddings()(hidden.gather(1, at[..., None].expand(-1, -1, hidden.shape[-1])))
    target = torch.tensor(asked, device=lm.device)  # (Q,); logits (B, Q, vocab): each position predicts the next
    picked = torch.log_softmax(logits.float(), -1).gather(2, target[None, :, None].expand(len(rows), -1, 1))
    return picked[..., 0].mean(-1).tolist()


def rerank(lm: LoadedModel, passages: Sequence[str], bm25: Sequence[float], question: str) -> list[int]:
    """The candidates' indices, best first: question likelihood plus BM25_WEIGHT x BM25 (scaled to a best of 1);
    the earlier candidate first on a tie."""
    likelihood = question_likelihood(lm, passages, question)
    top = max(bm25, default=0.0) or 1.0
    combined = [ll + BM25_WEIGHT * b / top for ll, b in zip(likelihood, bm25)]
    return sorted(range(len(passages)), key=lambda i: (-combined[i], i))


def passage_order(lm: LoadedModel, question: QuestionTurn, candidates: int) -> list[int] | None:
    """The passages the question's turn quotes and its answer's sources rank first: BM25's best `candidates` (of
    question.passages) reordered by the model (passage numbers, best first, as kvqa.evidence.sources takes them); None
    when off
    (under 2) or when fewer than two passages match."""
    if candidates < 2:
        return None
    found = question.passages[:candidates]
    if len(found) < 2:
        return None
    order = rerank(lm, [t for _, t, _ in found], [score for _, _, score in found], question.text)
    return [found[i][0] for i in order]


def quoted(lm: LoadedModel, question: QuestionTurn, options: Decoding) -> tuple[list[str], list[int] | None, float]:
    """What a question's turn quotes: its best options.quote_passages passages (options.rerank_passages of them
    reordered by the model first, when on), the passage order its sources then follow (None: BM25's), and the seconds
    choosing them took (counted in the answer's times). Every engine with a model builds a question's turn with it."""
    started = now(lm.device)
    order = passage_order(lm, question, options.rerank_passages)
    return question.quotes(options.quote_passages, order, chars=options.quote_chars), order, now(lm.device) - started
