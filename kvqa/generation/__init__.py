"""Generation: prefill, decode and drafting on a loaded model; the repeat stop; reranking."""
