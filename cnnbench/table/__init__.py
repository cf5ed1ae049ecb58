"""The CSV row: its schema, building rows from results, and the atomic, locked store."""
