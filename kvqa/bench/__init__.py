"""`python -m kvqa bench`: kvqa against the two usual ways of answering questions about one document.

One process, one model, the same document text and the same questions for every method, at several context lengths:

- `recompute`: the whole prompt (document and question) run from scratch for every question
  (LocalEngine.answer_turn_without_cache, what `kvqa ask --no-cache` does).
- `seed`: the cache reuse shown in transformers' documentation: the document prefilled once into a DynamicCache by
  one forward, then for every question `copy.deepcopy` of that cache and `model.generate(...)` on top of the copy.
- `kvqa`: LocalEngine.prefill once, then LocalEngine.answer_turn for every question, exactly as the CLI and the app use
  them. Its rows also carry `floor_ttft_s` (one bare forward of the question's tokens on the prefilled cache: what
  TTFT cannot go below), `unchunked_prefill_s` (the same prefill as one forward instead of chunks) and
  `decode_floor_s` (weights and KV at the context read once at this machine's bandwidth, measured once per run:
  what a decode step cannot go below), each with the measured figure over its floor.

Every figure is measured in this process, with the device synchronised before each clock read (kvqa.timing).
Greedy answers must be the same token ids for every method: each row says whether they are (`same_answers`).

One module per job, dependencies pointing down: `run` (the document cut to length, the whole bench, the command
line) uses `methods` (the three runners), `report` (table, targets, plot) and `models` (random weights from a
config); `methods` uses `memory` (the probes). None of kvqa's library modules imports the bench. The package
imports none of them itself (`kvqa.bench.flags` builds the command line's parser without torch): import from the
module, e.g. `from kvqa.bench.run import run_bench`.
"""
