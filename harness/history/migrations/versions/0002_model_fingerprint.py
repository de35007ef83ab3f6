"""Each case result carries its model's fingerprint (a case's series marks the run where the model changed)."""

import json
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("case_results") as batch:
        batch.add_column(sa.Column("model_fingerprint", sa.String(64), nullable=True))
    _backfill()


def _backfill() -> None:
    """The fingerprints of runs recorded before this column, read from the results.json each was recorded from
    (`runs.source`) where it is still readable; a run whose file is gone keeps None (not known, never a change)."""
    conn = op.get_bind()
    runs = conn.execute(sa.text("select id, source from runs where source <> ''")).fetchall()
    for run_pk, source in runs:
        found = _fingerprints(source)
        if not found:
            continue
        cases = dict(conn.execute(sa.text("select c.key, r.id from case_results r join cases c on c.id = r.case_pk "
                                          "where r.run_pk = :run"), {"run": run_pk}).fetchall())
        for key, fingerprint in found.items():
            if key in cases:
                conn.execute(sa.text("update case_results set model_fingerprint = :fp where id = :id"),
                             {"fp": fingerprint[:64], "id": cases[key]})


def _fingerprints(source: str) -> dict[str, str]:
    """Case id -> model fingerprint from a stored results.json ({} when it cannot be read: never an error)."""
    from harness.errors import ResultsError
    from harness.results.schema import CaseId

    path = Path(source)
    try:
        if path.is_dir():
            path = path / "results.json"
        if not path.is_file() or path.stat().st_size > 512 * 1024 * 1024:
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out: dict[str, str] = {}
    for c in data.get("cases", []) if isinstance(data, dict) else ():
        try:
            fingerprint = c.get("model_fingerprint")
            if isinstance(fingerprint, str) and fingerprint:
                out[CaseId.from_dict(c["case"]).id] = fingerprint
        except (AttributeError, KeyError, TypeError, ValueError, ResultsError):  # a case id the reader refuses
            continue
    return out


def downgrade() -> None:
    with op.batch_alter_table("case_results") as batch:
        batch.drop_column("model_fingerprint")
