"""Caches kept: the disk store, sharing between sessions, restoring, and the memory budget."""
