"""ONNX Runtime's profiler events mapped onto the source graph's nodes (a fused kernel credited to the nodes it
covers)."""

from __future__ import annotations

from typing import Any

LAYOUT_OPS = frozenset({"ReorderInput", "ReorderOutput", "MemcpyToHost", "MemcpyFromHost"})


def ort_profile_ops(events: Any, optimized: Any, source: Any, runs: int) -> tuple[Any, ...]:
    """ONNX Runtime's profile (the JSON list of trace events) as OpTimes on `source`'s nodes: each "Node"
    event named `<node>_kernel_time` within the last `runs` "model_run" events, averaged per run, credited to the
    source nodes its node of the `optimized` graph covers (harness.profile.layers.fused_covers: a fused node
    such as FusedConv, FusedMatMul, Attention or SkipLayerNormalization covers the nodes between its inputs and
    outputs, its op type named as the fusion; a node ONNX Runtime added, such as a layout reorder, is unmapped)."""
    from harness.profile.layers import OpTime, SourceGraph, fused_covers, renamed_output

    graph = SourceGraph.from_model(source)
    opt = optimized.graph
    kept = {t for n in opt.node for t in (*n.input, *n.output) if t} | {i.name for i in opt.input}
    kept |= {t.name for t in opt.initializer}
    # a node ORT renamed after the tensor it computes (NCHWc: "<tensor>_nchwc") keeps that tensor materialised
    kept |= {b for b in (renamed_output(graph, n.name) for n in opt.node) if b is not None}
    nodes = {n.name: n for n in opt.node}
    trace = events["traceEvents"] if isinstance(events, dict) else events
    run_spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in trace
                       if e.get("cat") == "Session" and e.get("name") == "model_run")[-runs:]

    def in_runs(ts: float) -> bool:
        return any(lo <= ts <= hi for lo, hi in run_spans)

    times: dict[str, float] = {}
    kinds: dict[str, str] = {}
    for e in trace:
        name = str(e.get("name", ""))
        if e.get("cat") != "Node" or not name.endswith("_kernel_time") or not in_runs(e.get("ts", -1)):
            continue
        node = name[: -len("_kernel_time")]
        times[node] = times.get(node, 0.0) + float(e.get("dur", 0))
        kinds[node] = str(e.get("args", {}).get("op_name", ""))
    n = max(1, len(run_spans))
    out = []
    for node, total in times.items():
        proto = nodes.get(node)
        op_type = kinds[node] or (proto.op_type if proto is not None else "")
        if op_type in LAYOUT_OPS:
            covers: tuple[str, ...] = ()  # a layout change ORT added: no source node computes it
        elif proto is not None:
            covers = fused_covers(graph, node, [t for t in proto.input if t], [t for t in proto.output if t], kept)
        else:
            covers = fused_covers(graph, node, (), (), kept)
        domain = proto.domain if proto is not None else ""
        kind = op_type if domain in ("", "ai.onnx", "com.microsoft") else f"{domain.rsplit('.', 1)[-1]}.{op_type}"
        fusion = kind if len(covers) > 1 or (covers and graph.op_types.get(covers[0]) != op_type) else ""
        out.append(OpTime(node, op_type, total / n, covers, fusion))
    return tuple(out)


