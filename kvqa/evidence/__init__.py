"""Evidence: the passages that answer a question, ranked, and the names a document does not hold."""
