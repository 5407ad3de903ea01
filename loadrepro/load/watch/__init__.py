"""Live watchers of the target during a run: /health, /metrics and the engine's log."""
