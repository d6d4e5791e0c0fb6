"""The class round: games, rounds, players, entries.

Revision ID: 0001
Revises:
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "games",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("code", sa.String(12), nullable=False, unique=True),
        sa.Column("host_token_sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("view", sa.JSON(), nullable=False),
    )
    op.create_index("ix_games_created_at", "games", ["created_at"])
    op.create_table(
        "rounds",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("game_id", sa.Integer(), sa.ForeignKey("games.id", ondelete="CASCADE"), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("mechanism", sa.String(16), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("epsilon_per_km", sa.Float(), nullable=False),
        sa.Column("n_reports", sa.Integer(), nullable=False),
        sa.Column("secret_mode", sa.String(8), nullable=False),
        sa.Column("shared_place", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(10), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("revealed_at", sa.DateTime(), nullable=True),
        sa.Column("summary", sa.JSON(), nullable=True),
        sa.UniqueConstraint("game_id", "number"),
    )
    op.create_table(
        "players",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("game_id", sa.Integer(), sa.ForeignKey("games.id", ondelete="CASCADE"), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("token_sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("joined_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("game_id", "number"),
    )
    op.create_table(
        "entries",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("round_id", sa.Integer(), sa.ForeignKey("rounds.id", ondelete="CASCADE"), nullable=False),
        sa.Column("player_id", sa.Integer(), sa.ForeignKey("players.id", ondelete="CASCADE"), nullable=False),
        sa.Column("secret_place", sa.Integer(), nullable=False),
        sa.Column("reports", sa.JSON(), nullable=False),
        sa.Column("guess_place", sa.Integer(), nullable=True),
        sa.Column("guessed_at", sa.DateTime(), nullable=True),
        sa.Column("n_guesses", sa.Integer(), nullable=False),
        sa.Column("error_m", sa.Float(), nullable=True),
        sa.Column("bayes_place", sa.Integer(), nullable=True),
        sa.Column("bayes_error_m", sa.Float(), nullable=True),
        sa.Column("rank", sa.Integer(), nullable=True),
        sa.UniqueConstraint("round_id", "player_id"),
    )
    op.create_index("ix_entries_round", "entries", ["round_id"])


def downgrade() -> None:
    op.drop_index("ix_entries_round", table_name="entries")
    op.drop_table("entries")
    op.drop_table("players")
    op.drop_table("rounds")
    op.drop_index("ix_games_created_at", table_name="games")
    op.drop_table("games")
