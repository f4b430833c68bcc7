"""Documents in: reading files of every kind, uploads, and a document's pages and parts."""
