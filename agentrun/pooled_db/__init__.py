"""The PostgreSQL backend of a pooling server process (see `base`)."""
