from c4p.cli import main

main()
