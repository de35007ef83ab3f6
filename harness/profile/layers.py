"""Where the time goes: a runtime's per-op profile mapped onto the ONNX graph's nodes (a fused kernel credited to
the nodes it covers, the fusion named), with each node's FLOPs, bytes and achieved rate (docs/profile.md)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.results.stored import ProfileNodeRecord, ProfileRecord, ProfileUnmappedRecord, RooflineRecord

TOP_LAYERS = 10  # the report's "where the time goes" rows per model: the top layers, then "the rest"


class CannotProfile(HarnessError):
    """A runtime (or this case on it) has no per-op profile to give; the message says why (stored per case)."""


@dataclass(frozen=True)
class OpTime:
    """One kernel (or module) of a runtime's profiled pass.

    name: its name in the runtime's profile; op_type: its kind there (e.g. FusedConv, Convolution, Linear);
    time_us: microseconds per inference (averaged over the profiled runs); covers: the ONNX nodes it computes
    (empty: not mapped onto the graph); fusion: the fused kernel's name when it covers nodes it was fused from."""

    name: str
    op_type: str
    time_us: float
    covers: tuple[str, ...] = ()
    fusion: str = ""


@dataclass(frozen=True)
class OpProfile:
    """A runtime's profiled pass: its ops' times per inference, the runs they average over, the wall time per
    inference of those runs (the profiler's own cost included), how they were taken, and the ONNX graph whose
    node names `covers` uses."""

    ops: tuple[OpTime, ...]
    runs: int
    wall_us: float
    method: str
    graph: Path | None = None
    notes: tuple[str, ...] = ()


# ------------------------------------------------------------------------------------------ the source graph
@dataclass
class SourceGraph:
    """The ONNX graph a profile maps onto: node names (an unnamed node is `#index`, as graph_cost names it),
    which node produces each tensor, each node's inputs, and the module scope the torch exporter recorded."""

    names: list[str]
    op_types: dict[str, str]
    inputs: dict[str, tuple[str, ...]]
    outputs: dict[str, tuple[str, ...]]
    producer: dict[str, str]  # tensor -> node
    boundary: set[str]  # graph inputs and initializers
    scopes: dict[str, str] = field(default_factory=dict)  # node -> innermost module path ("" the root)

    @classmethod
    def from_model(cls, model: Any) -> "SourceGraph":
        """From an onnx.ModelProto or a path to one (local functions inlined, as graph_cost does)."""
        import onnx

        if isinstance(model, (str, Path)):
            model = onnx.load(str(model), load_external_data=False)
        if model.functions:
            from onnx import inliner

            model = inliner.inline_local_functions(model)
        g = model.graph
        names, op_types, ins, outs, producer, scopes = [], {}, {}, {}, {}, {}
        for i, node in enumerate(g.node):
            name = node.name or f"#{i}"
            names.append(name)
            op_types[name] = node.op_type
            ins[name] = tuple(t for t in node.input if t)
            outs[name] = tuple(t for t in node.output if t)
            for t in outs[name]:
                producer[t] = name
            scope = _scope(node)
            if scope is not None:
                scopes[name] = scope
        boundary = {i.name for i in g.input} | {t.name for t in g.initializer}
        # a Constant node's value is a weight like an initializer (paddle2onnx writes every weight so): a
        # runtime folds it, so a kernel's walk back stops there and no time is credited to it
        boundary |= {t for n, kind in op_types.items() if kind == "Constant" for t in outs[n]}
        return cls(names, op_types, ins, outs, producer, boundary, scopes)

    def resolve(self, name: str) -> str | None:
        """A node named `name`, else the node producing a tensor named `name`, else the longest node name that
        `name` starts with (a runtime's decomposition of a node, e.g. "/conv1/Conv/WithoutBiases"); None."""
        if name in self.op_types:
            return name
        if name in self.producer:
            return self.producer[name]
        best = None
        for i in range(len(name) - 1, 0, -1):
            if name[:i] in self.op_types and name[i] in "/_.:#":
                best = name[:i]
                break
        return best

    def between(self, inputs: Iterable[str], outputs: Iterable[str], kept: set[str],
                unkept: Iterable[str] = ()) -> tuple[str, ...]:
        """The nodes computing `outputs` from `inputs`: walking back from the outputs' producers, through tensors
        the optimized graph no longer holds (`kept`: the tensors it does, less `unkept`), stopping at `inputs`,
        graph inputs and initializers. In graph order; () when an output is not a tensor of this graph. Work in
        proportion to the nodes walked, never to the graph's size (a profile maps every node of a 20,000-node
        graph through here)."""
        stop = set(inputs)
        unkept = set(unkept)
        todo = [self.producer.get(t) for t in outputs]
        if not todo or None in todo:
            return ()
        seen: set[str] = set()
        while todo:
            node = todo.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            for t in self.inputs[node]:
                if t in stop or t in self.boundary or (t in kept and t not in unkept) or t not in self.producer:
                    continue
                todo.append(self.producer[t])
        index = self.index
        return tuple(sorted(seen, key=index.__getitem__))

    @functools.cached_property
    def index(self) -> dict[str, int]:
        """Each node's place in graph order."""
        return {n: i for i, n in enumerate(self.names)}

    @functools.cached_property
    def longest_first(self) -> list[str]:
        """Node names, the longest first (a runtime's name that contains one)."""
        return sorted((n for n in self.op_types if len(n) > 3), key=len, reverse=True)

    def nodes_of_scope(self) -> dict[str, list[str]]:
        """Innermost module path -> its nodes (the nodes the torch exporter recorded a scope for)."""
        out: dict[str, list[str]] = {}
        for n in self.names:
            if n in self.scopes:
                out.setdefault(self.scopes[n], []).append(n)
        return out


SCOPE_KEY = "pkg.torch.onnx.name_scopes"  # torch.onnx (dynamo): the module path of each node, as a list
HIERARCHY_KEY = "pkg.torch.onnx.class_hierarchy"  # beside it: the modules' classes, then the node's op


def _scope(node: Any) -> str | None:
    """The innermost module path the torch exporter recorded on a node ("layer1.0.conv1"; "" for the root)."""
    import ast

    props = {p.key: p.value for p in node.metadata_props}
    if SCOPE_KEY not in props:
        return None
    try:
        parts = ast.literal_eval(props[SCOPE_KEY])
        hierarchy = ast.literal_eval(props.get(HIERARCHY_KEY, "None"))
    except (ValueError, SyntaxError):
        return None
    parts = [str(s) for s in parts] if isinstance(parts, (list, tuple)) else []
    if isinstance(hierarchy, (list, tuple)) and len(hierarchy) == len(parts) and parts:
        parts = parts[:-1]  # the last pair is the fx node itself (its op), not a module
    parts = [s for s in parts if s]
    # each entry is an enclosing module's path ("layer1", "layer1.0", "layer1.0.conv1"): the innermost is the last
    return parts[-1] if parts else ""


def renamed_output(graph: SourceGraph, name: str) -> str | None:
    """The source tensor a node's name is made of (`<tensor>_<suffix>`, the suffix a layout's or pass's tag),
    when it names no node itself; else None."""
    if name in graph.op_types or "_" not in name:
        return None
    base = name.rsplit("_", 1)[0]
    return base if base in graph.producer and base not in graph.op_types else None


def fused_covers(graph: SourceGraph, name: str, inputs: Sequence[str], outputs: Sequence[str],
                 kept: set[str]) -> tuple[str, ...]:
    """The source nodes an optimized graph's node (`name`, its tensors) computes: the nodes between its inputs
    and outputs (a fusion that keeps its boundary tensors' names, e.g. ONNX Runtime's FusedConv, Gelu or
    Attention fusions), else the node its name names (resolve), else ()."""
    if outputs and all(t in graph.producer for t in outputs):
        nodes = graph.between(inputs, outputs, kept, unkept=outputs)
        if nodes:
            return nodes
    base = renamed_output(graph, name)
    if base is not None:  # a node named after the source tensor it computes (ONNX Runtime's "<tensor>_nchwc")
        nodes = graph.between((), (base,), kept, unkept=(base,))
        if nodes:
            return nodes
    own = graph.resolve(name)
    if own is not None:
        return (own,)
    for token in graph.longest_first:  # "fused /a/Conv", "/a/Conv_nchwc"
        if token in name:
            return (token,)
    return ()


def merge_profiles(profiles: Sequence[OpProfile]) -> OpProfile:
    """Profiles of the same case taken in several passes as one: each op's time and the wall time averaged
    over all the runs (weighted by each pass's runs)."""
    runs = sum(p.runs for p in profiles)
    ops: dict[tuple[str, tuple[str, ...]], list[Any]] = {}
    for p in profiles:
        for op in p.ops:
            row = ops.setdefault((op.name, op.covers), [op, 0.0])
            row[1] += op.time_us * p.runs
    first = profiles[0]
    merged = tuple(OpTime(op.name, op.op_type, total / runs, op.covers, op.fusion) for op, total in ops.values())
    return OpProfile(merged, runs, sum(p.wall_us * p.runs for p in profiles) / runs,
                     first.method + (f", in {len(profiles)} passes" if len(profiles) > 1 else ""), first.graph,
                     tuple(dict.fromkeys(n for p in profiles for n in p.notes)))


# ------------------------------------------------------------------------------------------ the mapping
def layer_times(profile: OpProfile, cost: Any = None) -> dict[str, Any]:
    """The profile on the graph's nodes: {"nodes": [{"node", "op_type", "time_us", "share", "fusion", "ops"}],
    "unmapped": [{"name", "op_type", "time_us"}], "mapped_us", "unmapped_us", "total_us"}.

    An op covering one node gives it its time exactly; one covering several (a fused kernel) splits its time
    among them by their FLOPs (`cost`: a GraphCost), equally where none is counted, and names its fusion on
    each. Nodes come in graph order when `cost` gives it (else in profile order), only those with time."""
    flops = {n.name: n.flops or 0 for n in cost.nodes} if cost is not None else {}
    types = {n.name: n.op_type for n in cost.nodes} if cost is not None else {}
    times: dict[str, float] = {}
    fusion: dict[str, str] = {}
    ops: dict[str, list[str]] = {}
    unmapped: dict[str, dict[str, Any]] = {}
    for op in profile.ops:
        if not op.covers:
            row = unmapped.setdefault(op.name, {"name": op.name, "op_type": op.op_type, "time_us": 0.0})
            row["time_us"] += op.time_us
            continue
        weights = [float(flops.get(n, 0)) for n in op.covers]
        total = sum(weights)
        if total <= 0:
            weights, total = [1.0] * len(op.covers), float(len(op.covers))
        for n, w in zip(op.covers, weights):
            times[n] = times.get(n, 0.0) + (op.time_us if len(op.covers) == 1 else op.time_us * w / total)
            ops.setdefault(n, []).append(op.name)
            if op.fusion or len(op.covers) > 1:
                named = op.fusion or op.op_type
                fusion[n] = named if not fusion.get(n) or named in fusion[n] else f"{fusion[n]} + {named}"
    order = [n.name for n in cost.nodes] if cost is not None else []
    in_order = set(order)
    order += [n for n in times if n not in in_order]
    mapped = sum(times.values())
    lost = sum(r["time_us"] for r in unmapped.values())
    total_us = mapped + lost
    nodes = [{"node": n, "op_type": types.get(n, ""), "time_us": times[n],
              "share": times[n] / total_us if total_us > 0 else 0.0, "fusion": fusion.get(n, ""),
              "ops": list(dict.fromkeys(ops[n]))} for n in order if n in times]
    return {"nodes": nodes, "unmapped": sorted(unmapped.values(), key=lambda r: -r["time_us"]),
            "mapped_us": mapped, "unmapped_us": lost, "total_us": total_us}


# Node names an exporter generates rather than keeps: torch.onnx's dynamo exporter ("node_Conv_347",
# "node_linear_1"), onnx's own "#12" for an unnamed node, bare op-type counters ("Conv_12", "MatMul_3").
_GENERATED_NAME = re.compile(r"^(node_[A-Za-z0-9_]+|#\d+|[A-Z][A-Za-z]*_\d+)$")


def layer_label(node: str, op_type: str = "", module: str | None = None,
                module_ops: Sequence[str] = ()) -> str:
    """The name a person knows a layer by: the module paths a module-scoped (torch) profile credited to the node
    (`module_ops`: "layer1.0.conv1 + bn1 (Conv)" for a BatchNorm the export folded into its Conv) when they
    include its recorded module path or none was recorded; else the module path the torch exporter recorded
    ("layer1.0.bn1 (Conv)": the fold keeps the BatchNorm's scope); else the ONNX node's own name, which a user's
    exporter kept ("p2o.Conv.7"); a generated name ("node_Conv_347") only when nothing better is known."""
    kind = f" ({op_type})" if op_type else ""
    paths = [m for m in module_ops if m and " " not in m and not _GENERATED_NAME.match(m)]
    if paths and (not module or module in paths):  # the richer name: a fold's modules ("conv1 + bn1")
        return f"{_joined(paths[:2])}{' + ...' if len(paths) > 2 else ''}{kind}"
    if module:
        return f"{module}{kind}"
    return f"{node}{kind}" if _GENERATED_NAME.match(node) else node


def _joined(paths: Sequence[str]) -> str:
    """Module paths joined with their shared parent written once: "layer1.0.conv1 + bn1"."""
    first, rest = paths[0], list(paths[1:])
    parent = first.rsplit(".", 1)[0] + "." if "." in first else ""
    short = [p[len(parent):] if parent and p.startswith(parent) and not p[len(parent):].isdigit() else p
             for p in rest]  # "stem.0 + stem.1", never "stem.0 + 1"
    return " + ".join([first] + short)


def profile_record(profile: OpProfile, cost: Any, measured_p50_ms: float, roofline: RooflineRecord | None,
                   scopes: Mapping[str, str] | None = None,
                   op_types: Mapping[str, str] | None = None) -> ProfileRecord:
    """What a case stores of its profile (CaseResult.profile): the per-node times with each node's FLOPs, bytes
    and achieved GFLOP/s and GB/s and its module path (`module`, where the torch exporter recorded one in
    `scopes`: SourceGraph.scopes of the graph; op types from `op_types` where the cost is unknown), the ops not
    mapped, the profile's total against the measured p50
    and the gap (percent of the p50), and the case's roofline point."""
    table = layer_times(profile, cost)
    costs = {n.name: n for n in cost.nodes} if cost is not None else {}
    nodes = []
    for row in table["nodes"]:
        c = costs.get(row["node"])
        t_s = row["time_us"] * 1e-6
        f = c.flops if c is not None else None
        b = c.bytes_moved if c is not None else None
        if scopes and scopes.get(row["node"]):
            row["module"] = scopes[row["node"]]
        if not row.get("op_type") and op_types and op_types.get(row["node"]):
            row["op_type"] = op_types[row["node"]]
        nodes.append(ProfileNodeRecord(**row, time_ms=row["time_us"] / 1e3, flops=f, bytes_moved=b,
                                       gflops=f / t_s / 1e9 if f is not None and t_s > 0 else None,
                                       gbs=b / t_s / 1e9 if b is not None and t_s > 0 else None))
    total_ms = table["total_us"] / 1e3
    return ProfileRecord(
        method=profile.method, runs=profile.runs, graph=str(profile.graph) if profile.graph else None,
        notes=list(profile.notes), nodes=nodes,
        unmapped=[ProfileUnmappedRecord(**r, time_ms=r["time_us"] / 1e3) for r in table["unmapped"]],
        mapped_ms=table["mapped_us"] / 1e3, unmapped_ms=table["unmapped_us"] / 1e3,
        total_ms=total_ms, wall_ms=profile.wall_us / 1e3, measured_p50_ms=measured_p50_ms,
        gap_percent=100.0 * (total_ms - measured_p50_ms) / measured_p50_ms if measured_p50_ms > 0 else None,
        roofline=roofline)


def top_layers(nodes: Sequence[ProfileNodeRecord], n: int = TOP_LAYERS) -> tuple[list[ProfileNodeRecord], float]:
    """The `n` nodes with the most time (most first) and the time (ms) of all the others."""
    ranked = sorted(nodes, key=lambda r: -float(r.time_ms))
    return list(ranked[:n]), sum(float(r.time_ms) for r in ranked[n:])
