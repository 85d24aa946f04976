"""Tables, engine factory, dialect helpers and migrations."""
