"""Alembic's environment for the class database: online migrations on the connection app.server.db.store passes."""

from alembic import context

from app.server.db.models import Base

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover (the store always passes its connection)
    raise RuntimeError("Run the class database's migrations through app.server.db.store.migrate(engine).")
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
