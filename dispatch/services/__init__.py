"""Writes of the dispatch app.

- `intents`: record an intent with its command, fence open intents when their run or
  command goes terminal (called from the runs and sessions services, inside their
  transactions).
"""
