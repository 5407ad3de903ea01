"""The run report: its schema (model.py), how it is built from a run (build.py), and its renderings."""
