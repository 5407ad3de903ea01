"""The command line: parsing each command's flags, running it, and what it prints."""
