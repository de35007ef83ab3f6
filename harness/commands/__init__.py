"""One module per command family, each owning its parser and its run (cli.py only dispatches)."""
