"""The class database: its engine and migrations (store), its schema (models)."""
