"""The journal: a SQLite file (WAL) recording every operation, attachment and delegate step."""
