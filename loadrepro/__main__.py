from loadrepro.cli import main

main()
