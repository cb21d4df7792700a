"""The beat schedule: one entry per periodic task, each with why it runs that often.

Every periodic task runs one bounded batch, is safe on many workers at once (SKIP LOCKED,
fencing or a try-lock), and expires after about 1.5 times its interval so a slow worker never
builds a backlog of the same job. Prompt pickup comes from on-commit wake-ups; these
entries are the safety net.
"""

from __future__ import annotations

from typing import Any

from agentrun.task_queues import TASK_QUEUES, TaskName


def every(seconds: float, task: TaskName) -> dict[str, Any]:
    """A beat entry for `task` on its routed queue, expiring after 1.5 intervals."""
    options = {"expires": seconds * 1.5, "queue": TASK_QUEUES[task].value}
    return {"task": task.value, "schedule": seconds, "options": options}


BEAT_SCHEDULE: dict[str, dict[str, Any]] = {}

# Runner dispatch. On-commit wake-ups claim new intents at once; this catches what they
# miss (a lost wake-up, retries and capacity waits coming due): a claim over the partial
# due-open index is cheap, so every 5 s keeps the worst-case pickup short.
BEAT_SCHEDULE["dispatch-batch"] = every(5, TaskName.DISPATCH_BATCH)
# A dead runner's run must fail within about a lease; leases are 60 s by default.
BEAT_SCHEDULE["reap-leases"] = every(15, TaskName.REAP_LEASES)
# Asks each launcher about up to a batch of jobs: API calls, so once a minute.
BEAT_SCHEDULE["reconcile-runner-jobs"] = every(60, TaskName.RECONCILE_RUNNER_JOBS)

# Kafka outbox relay. On-commit wake-ups relay new records at once and a full batch chains
# the next; this catches lost wake-ups and retries coming due after a broker outage. An
# empty claim reads only the pending index, so every 5 s is cheap.
BEAT_SCHEDULE["outbox-relay"] = every(5, TaskName.RELAY_BATCH)
# Retention is counted in days, so minutes of lag do not matter; every 5 min keeps each run
# to a few bounded delete batches (a run that leaves more chains the next one).
BEAT_SCHEDULE["outbox-prune"] = every(300, TaskName.PRUNE_OUTBOX)

# Webhook relay. On-commit wake-ups send new deliveries at once and a full batch chains the
# next; this sends retries coming due and catches lost wake-ups. An idle claim reads only
# the partial pending index, so every 5 s is cheap.
BEAT_SCHEDULE["webhook-relay"] = every(5, TaskName.WEBHOOK_RELAY_BATCH)

# Work queue. On-commit wake-ups start new tasks at once and run again when a task's run
# ends; this starts what they miss (a lost wake-up, a session whose turn ended without a
# run ending) and projects runs that ended unseen. An idle claim reads only the partial
# pending index, so every 5 s is cheap.
BEAT_SCHEDULE["queue-schedule"] = every(5, TaskName.SCHEDULE_QUEUE)

# Approvals past their `expires_at` resolve `expired` and the waiting runner's backend is
# denied; the sweep reads only the partial pending index, so every 10 s is cheap and keeps
# an expiry within seconds of its deadline (an answer after it is refused anyway).
BEAT_SCHEDULE["expire-approvals"] = every(10, TaskName.EXPIRE_APPROVALS)

# Operator doctor: logs impossible states and repairs nothing (`agentrun_doctor --fix` does,
# once a person has read why). They come from bugs, crashes between systems or hand edits,
# not from load, so every 10 min is prompt enough; its checks are bounded, indexed reads.
BEAT_SCHEDULE["doctor-report"] = every(600, TaskName.DOCTOR_REPORT)
