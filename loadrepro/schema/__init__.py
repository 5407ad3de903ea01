"""The schemas of what a run writes for others to read: report.json and a sweep's sweep.json."""
