"""Peer instruction: a round's second vote (the first vote's guesses kept) and the lecturer's timer.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("rounds", sa.Column("vote", sa.Integer(), nullable=False, server_default="1"))
    op.add_column("rounds", sa.Column("timer_ends_at", sa.DateTime(), nullable=True))
    op.add_column("entries", sa.Column("first_guess_place", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("entries", "first_guess_place")
    op.drop_column("rounds", "timer_ends_at")
    op.drop_column("rounds", "vote")
