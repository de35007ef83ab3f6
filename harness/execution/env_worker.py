"""The supervised worker in a runtime environment's interpreter (harness.envs): the same loop, another Python."""

from __future__ import annotations

import sys
from multiprocessing.connection import Connection


def main(argv: list[str]) -> None:
    """`python -m harness.execution.env_worker FD LOG_PATH CAP_BYTES DEFER [LOOP]`: serve the parent on socket FD
    with the matrix's case loop (LOOP `case`, the default) or `harness recommend`'s probe loop (`capacity`)."""
    fd, log_path, cap, defer, *rest = argv
    if rest and rest[0] == "capacity":
        from harness.execution.capacity_worker import _main

        _main(Connection(int(fd)), log_path)
        return
    from harness.execution.supervisor import _worker_main

    _worker_main(Connection(int(fd)), log_path, int(cap) or None, defer == "1")


if __name__ == "__main__":
    main(sys.argv[1:])
