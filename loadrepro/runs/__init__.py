"""Running the load: one run against a target, each side of an A/B over trials, a sweep to the breaking point."""
