from loadrepro.cli.commands import entry

entry()
