"""`harness recommend`: its parser (option groups, harness.options.capacity) and one call of recommend_run (--ray:
recommend_ray), both in harness.execution; exit 0 confirmed, 3 could not judge, 2 bad input (docs/recommend.md)."""

from __future__ import annotations

import argparse
from typing import Any

from harness.commands.common import Command, add_groups
from harness.options.capacity import RECOMMEND_GROUPS, parse_capacity_options


def add_parser(sub: Any) -> None:
    p = sub.add_parser("recommend", help="replay a traffic against runtime x precision x variant x threads x "
                                         "batcher, find each capacity under an SLO, and recommend one")
    add_groups(p, RECOMMEND_GROUPS)


def cmd_recommend(args: argparse.Namespace) -> int:
    """`harness recommend`: the options as a typed configuration, run by harness.execution.recommend_run (with --ray:
    each configuration's search on one node of a Ray cluster, harness.execution.recommend_ray)."""
    config = parse_capacity_options(vars(args))
    if config.fleet.ray:
        from harness.execution.recommend_ray import ray_recommend

        return ray_recommend(config)
    from harness.execution.recommend_run import recommend_run

    return recommend_run(config)


COMMANDS = {"recommend": Command(cmd_recommend)}
