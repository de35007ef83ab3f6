"""`harness COMMAND`: the entry point (signals, a closed pipe, usage errors) and the dispatch to the commands in
harness/commands/, one module per family, each owning its parsers and its runs (the registry below)."""

from __future__ import annotations

import sys

try:  # Ctrl-C while these load (about a second: the config pulls numpy, platform probes) is one line, 130
    import argparse
    import signal
    from typing import Any, Sequence

    from harness.commands import ab, bisect, conform, envs, gate, gating, history, listing, recommend, run
    from harness.commands.common import EXIT_INTERRUPTED, Command
    from harness.display import visible
    from harness.errors import HarnessError
    from harness.gating.verdicts import EXIT_USAGE
except KeyboardInterrupt:
    # Nothing has run yet: one line and 130, ending the process here. A SystemExit raised from a module being
    # imported by runpy (python -m harness.cli) could still end as a death by SIGINT (exit -2): seen in CI.
    import os

    print("harness: interrupted", file=sys.stderr)
    sys.stderr.flush()
    os._exit(130)

EXIT_BROKEN_PIPE = 128 + 13  # SIGPIPE

# The commands: each module adds its parsers (`add_parser(sub)`, in this order on `harness --help`) and maps each
# command it adds to its run (`COMMANDS`). A new command is one module in harness/commands/ and one name here.
FAMILIES = (run, gating, history, conform, ab, gate, recommend, envs, bisect, listing)
COMMANDS: dict[str, Command] = {name: command for family in FAMILIES for name, command in family.COMMANDS.items()}


class _Parser(argparse.ArgumentParser):
    """argparse with "did you mean" (difflib) for a mistyped option or command (`--bach-sizes`, `rnu`); its
    subcommands' parsers are of this class too (add_subparsers makes them of the parser's own type)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # no abbreviations: `--precision int8` is not `--precisions int8` (a whole matrix ran on a typo); an
        # unknown option is an error with "did you mean" instead
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> Any:  # type: ignore[override]
        from harness.errors import did_you_mean

        named = message.split(": ", 1)  # "argument --levels: --levels 'five': ...": the option named once
        if named[0].startswith("argument ") and len(named) == 2 and named[1].startswith(named[0].split(" ", 1)[1]):
            message = named[1]
        if message.startswith("unrecognized arguments: "):
            options = self._option_strings_below()
            message = "unrecognized arguments: " + " ".join(
                tok + (did_you_mean(tok.split("=", 1)[0], options) if tok.startswith("--") else "")
                for tok in message.removeprefix("unrecognized arguments: ").split())
        elif message.startswith("argument COMMAND: invalid choice: ") or " invalid choice: " in message:
            word = message.split("invalid choice: ", 1)[1].split(" (choose from", 1)[0].strip("'\"")
            choices = [c for a in self._actions if a.choices for c in a.choices]
            message += did_you_mean(word, choices)
        return super().error(message)

    def _option_strings_below(self) -> list[str]:
        """Every --option of this parser and of its subcommands' parsers, at any depth."""
        out: list[str] = []
        todo: list[argparse.ArgumentParser] = [self]
        while todo:
            parser = todo.pop()
            for action in parser._actions:
                out += [o for o in action.option_strings if o.startswith("--")]
                if isinstance(action, argparse._SubParsersAction):
                    todo += list(action.choices.values())
        return out


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="harness", description="Benchmark and conformance harness for ML inference.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for family in FAMILIES:
        family.add_parser(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The `harness` command. Safe to pipe and to interrupt at any moment: a reader that goes away (`harness
    env | head`) ends the command quietly with 141 (128 + SIGPIPE, what a shell reports for `yes | head`);
    Ctrl-C before a run's session exists is one line and 130 (a session handles it itself: finished cases
    kept)."""
    command = "harness"
    previous = _watch_sigint()
    try:
        args = _parser().parse_args(argv)
        command = f"harness {args.command}"
        status = _dispatch(args)
        sys.stdout.flush()  # a closed pipe fails here, inside the handler, not in the interpreter's last flush
        if _SIGINTS and status not in (EXIT_INTERRUPTED, 128 + signal.SIGTERM):
            # a Ctrl-C before the command's session took over that an extension turned into an error of its own
            # (an import, then a case "error"): the user interrupted; never exit 1 as if a case had broken
            raise KeyboardInterrupt
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt as exc:  # Ctrl-C, or the signal a run session stopped on (SignalStop: 130, 143)
        signum = getattr(exc, "signum", signal.SIGINT)
        try:
            print(f"{command}: {'terminated' if signum == signal.SIGTERM else 'interrupted'}", file=sys.stderr)
        except (BrokenPipeError, OSError):
            pass
        status = 128 + int(signum)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if argv is None and status in (EXIT_INTERRUPTED, 128 + signal.SIGTERM):
        _exit_now(status)
    return status


_SIGINTS: list[int] = []


def _on_sigint(signum: int, frame: Any) -> None:
    _SIGINTS.append(signum)
    raise KeyboardInterrupt


def _watch_sigint() -> Any:
    """Python's own Ctrl-C behaviour, remembering that it happened: an extension that turns the
    KeyboardInterrupt raised inside its import into an error of its own (onnxruntime: `ImportError:
    initialization failed`, then "no runtime to run") is still an interrupt (130). Returns the handler to
    restore, None where SIGINT is not Python's default (ignored in a background job, or not the main thread)."""
    _SIGINTS.clear()
    try:
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return None
        return signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not the main thread
        return None


def _exit_now(status: int) -> None:
    """End the process with `status` now (what was measured is written by then). A KeyboardInterrupt that
    passed through code an extension ran with PyRun_* during an import marks the interpreter as killed by
    SIGINT, whatever the harness then returns: a normal exit would end as a death by SIGINT (-2), not 130
    or 143 (seen with Ctrl-C in the first seconds of `harness ab`)."""
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of a closed pipe raises nothing."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _dispatch(args: argparse.Namespace) -> int:
    command = COMMANDS[args.command]
    try:
        if command.plugins:  # it resolves model or runtime names: the zoo and user packages first
            from harness.plugins import load_plugins

            load_plugins()
        return command.run(args)
    except HarnessError as exc:  # UsageError, ResultsError, ...: one line, control characters made visible
        if _SIGINTS:  # the error came of a Ctrl-C an import turned into its own error: an interrupt
            raise KeyboardInterrupt from exc
        print(f"harness {args.command}: error: {visible(exc)}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
