"""Run history in a database (SQLAlchemy, Alembic migrations) and change points over each case's history."""

from harness.history.changes import ChangePoint, change_points
from harness.history.store import History, history_url, open_history

__all__ = ["ChangePoint", "History", "change_points", "history_url", "open_history"]
