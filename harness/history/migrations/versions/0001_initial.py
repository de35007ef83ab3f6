"""The first schema: runs, cases, case_results."""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_id", sa.String(200), nullable=False),
        sa.Column("started_at", sa.String(64), nullable=False),
        sa.Column("finished_at", sa.String(64), nullable=True),
        sa.Column("commit", sa.String(64), nullable=True),
        sa.Column("dirty", sa.Boolean(), nullable=True),
        sa.Column("machine_fingerprint", sa.String(64), nullable=False),
        sa.Column("machine", sa.String(500), nullable=False),
        sa.Column("harness_version", sa.String(64), nullable=False),
        sa.Column("complete", sa.Boolean(), nullable=False),
        sa.Column("source", sa.String(1000), nullable=False),
        sa.Column("added_at", sa.String(64), nullable=False),
        sa.UniqueConstraint("run_id", "machine_fingerprint", name="uq_runs_run_machine"),
    )
    op.create_index("ix_runs_started_at", "runs", ["started_at"])
    op.create_index("ix_runs_machine_fingerprint", "runs", ["machine_fingerprint"])
    op.create_table(
        "cases",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("key", sa.String(400), nullable=False, unique=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("runtime", sa.String(100), nullable=False),
        sa.Column("precision", sa.String(16), nullable=False),
        sa.Column("batch", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=True),
        sa.Column("device", sa.String(32), nullable=False),
    )
    op.create_table(
        "case_results",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("run_pk", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("case_pk", sa.Integer(), sa.ForeignKey("cases.id"), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("p50_ms", sa.Float(), nullable=True),
        sa.Column("p99_ms", sa.Float(), nullable=True),
        sa.Column("mean_ms", sa.Float(), nullable=True),
        sa.Column("throughput_sps", sa.Float(), nullable=True),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("noisy", sa.Boolean(), nullable=True),
        sa.UniqueConstraint("run_pk", "case_pk", name="uq_case_results_run_case"),
    )
    op.create_index("ix_case_results_run_pk", "case_results", ["run_pk"])
    op.create_index("ix_case_results_case_pk", "case_results", ["case_pk"])


def downgrade() -> None:
    op.drop_table("case_results")
    op.drop_table("cases")
    op.drop_table("runs")
