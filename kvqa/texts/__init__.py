"""Every text kvqa shows a person, by owner: library.py (errors, notices, promises, the CLI), app.py (the page, its
panels and API) and bench.py. kvqa.messages merges them into one CATALOG; a message id lives in exactly one."""
