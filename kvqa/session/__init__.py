"""A reader's session: one document's cache, its parts, and asking a question of it."""
