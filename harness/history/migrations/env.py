"""Alembic environment of the history database: runs on the connection harness.history.store hands it."""

from alembic import context

from harness.history.models import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
