"""The joins per client address and round (issue 38): a new table, no existing table rebuilt.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-10
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A table of its own rather than columns on players: SQLite alters a table's constraints by copying and
    # dropping it, and dropping players would cascade to every entry.
    op.create_table(
        "join_slots",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("game_id", sa.Integer(), sa.ForeignKey("games.id", ondelete="CASCADE"), nullable=False),
        sa.Column("round_number", sa.Integer(), nullable=False),
        sa.Column("address_sha256", sa.String(64), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("joined_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("game_id", "round_number", "address_sha256", "slot"),
    )


def downgrade() -> None:
    op.drop_table("join_slots")
