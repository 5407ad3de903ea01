"""Files that ship inside reproducer bundles and run without loadrepro installed."""
