"""The store: DuckDB tables of section 8 behind one narrow interface, and the group-commit writer."""
