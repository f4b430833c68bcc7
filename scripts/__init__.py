"""What runs: the tools users, the Makefile, CI and the tests run (`.venv/bin/python scripts/NAME.py`), each importing
kvqa as the venv has it installed (`make setup`). A package so that a test can import one (`from scripts.load_test
import Server`, from the repository's root as `python -m pytest` runs); one-off measurements live in experiments/."""
