"""Judging a run: classification rules, the verdict, comparisons of two runs, and engine-log diagnosis."""
