"""`loadrepro shrink`: the smallest workload that still breaks the engine the same way."""
