"""Writes of the Agents API surface: session create/update/delete and event submission."""
