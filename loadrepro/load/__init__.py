"""Driving the target: the client, the runner that owns the load, managed engines, and the watchers."""
