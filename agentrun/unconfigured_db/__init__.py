"""The database backend in force while `DATABASE_URL` is unset (see `base`)."""
