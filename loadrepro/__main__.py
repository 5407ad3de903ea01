from loadrepro.cli.commands import main

main()
