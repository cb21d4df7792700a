"""Writes of the dispatch app.

- `claims`: claim a batch of due intents; complete (fenced by the claim triple); give
  intents back when their profile is at capacity.
- `failures`: retry with jittered exponential backoff; terminalise after the last attempt.
- `launch`: the dispatch step (claim, runner-create fence, capacity, launch, settle).
- `reconcile`: runner job reconciliation and the retention fence.
- `retry_now`: an operator makes a waiting intent due at once (admin action).

Recording an intent with its command and fencing open intents when their run or command
goes terminal is not a service: it is the projection tier's `dispatch.intents`, called
inside the runs and sessions services' transactions.
"""
