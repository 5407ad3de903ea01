"""What a run is told: the profile and its keys, the options of each command, defaults, KV-cache arithmetic."""
