"""Commands with a module of their own (parser and run); harness.cli dispatches to them."""
