"""Comparing runs: stock against patched (`comparison.py`), the regression gate (`gate.py`), and the statistics
over several trials of each side (`trials.py`)."""
