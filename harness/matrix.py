"""Case identities from a matrix: the one rule for `harness run`, plain pytest and qualification specs."""

from __future__ import annotations

from collections.abc import Iterable

from harness.precision import Precision
from harness.results.schema import CaseId


def case_ids(models: Iterable[str], runtimes: Iterable[str], precisions: Iterable[Precision | str],
             batch_sizes: Iterable[int], seq_lens: Iterable[int],
             output_lens: Iterable[int] | None = None,
             variants: Iterable[str | None] = (None,)) -> list[CaseId]:
    """The cases of models x runtimes x precisions x batch sizes (x seq lens for models with a sequence axis),
    in execution order: cases sharing a runtime activation are adjacent. A runtime may run a requested
    precision as another (torch-cpu: fp16 -> bf16; `case_precision`), once each; a model keeps the batch sizes
    its batch axis allows (`batch_sizes`). With `output_lens` (the generation workload) `seq_lens` are prompt
    lengths for every model and each case also has an output length (CaseId.gen); a runtime that cannot
    generate still gets its cases (skips with the reason). `variants` (canonical names, None: base) multiply
    each runtime x precision; a variant's cases share their own activation."""
    from harness.model import get_model
    from harness.plugins import load_plugins
    from harness.runtimes import get_runtime

    load_plugins()  # the zoo and plugin models/runtimes, before any name is resolved
    precisions, batch_sizes, seq_lens = tuple(precisions), tuple(batch_sizes), tuple(seq_lens)
    variants = tuple(variants) or (None,)
    gens: tuple[int | None, ...] = tuple(output_lens) if output_lens is not None else (None,)
    out = []
    for m in models:
        spec = get_model(m)
        for r in runtimes:
            cls = get_runtime(r)
            for p in dict.fromkeys(cls.case_precision(Precision(p)) for p in precisions):
                for v in variants:
                    for b in spec.batch_sizes(batch_sizes):
                        for s in (seq_lens if spec.has_seq or output_lens is not None else (None,)):
                            for g in gens:
                                out.append(CaseId(spec.name, cls.name, p, b, s, cls.device, g, v))
    return out


def generation_case_ids(models: Iterable[str], runtimes: Iterable[str], precisions: Iterable[Precision | str],
                        batch_sizes: Iterable[int], prompt_lens: Iterable[int],
                        output_lens: Iterable[int]) -> list[CaseId]:
    """The generation workload's cases (`case_ids` with prompt lengths as CaseId.seq and output lengths)."""
    return case_ids(models, runtimes, precisions, batch_sizes, prompt_lens, tuple(output_lens))
