"""The class round: "Where was this report made?", played from students' phones.

* :mod:`app.server.db.models`: the schema (SQLAlchemy 2 typed ORM).
* :mod:`app.server.db.store`: one engine per process from a URL (SQLite in data/ by default, any SQLAlchemy URL
  through ``PANDA_DB_URL``), migrated with Alembic on first use.
* :mod:`panda.class_round`: the Bayes attacker and the scores (pure numpy).
* :mod:`app.game.rounds`: what a lecturer and a student can do, with the rules (no streamlit).

The pages are app/app_pages/host.py (the lecturer) and app/app_pages/play.py (a student).
"""
