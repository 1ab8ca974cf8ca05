#!/usr/bin/env python3
"""Fault drills against a throwaway Stratus stack; run through scripts/drills.sh.

Each drill runs load through the HTTP API while it kills and restarts a part of the stack, then
checks what the clients were told against what the database holds:
  lost      acknowledged writes that are not there (must be 0)
  partial   atomic batches of which only some records are there (must be 0)
  5xx       answers other than success or a retryable CloudKit error with retryAfter (must be 0)
  hung      requests that got no answer within 30 s (must be 0)
and, for the workers, that their state equals a fresh replay of the event log and that no effect was
applied twice (a trigger the drills add to the query index records every record version written to
it: a version written twice is a duplicate effect).
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

BIN = os.environ["STRATUS_DRILL_BIN"]
WORK = os.environ["STRATUS_DRILL_WORK"]
PG_PORT = os.environ["STRATUS_DRILL_PG_PORT"]
TANSU = os.environ["STRATUS_DRILL_TANSU"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PSQL = None
CONTAINER = "iCloud.drills.stratus"
WORKERS = ["stratus-indexer", "stratus-subscriptions", "stratus-gc", "stratus-shares"]


def log(text):
    print(f"[drills] {text}", flush=True)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def accepts(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_until(what, condition, timeout=60.0, every=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(every)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


DATABASE_PORT = PG_PORT  # the cluster psql() asks: the drills' own, or backup-restore's restored one while it checks that


def psql(sql):
    global PSQL
    if PSQL is None:
        PSQL = subprocess.run(["bash", "-c", f"source {ROOT}/scripts/lib.sh; echo $(pg_bin_dir)/psql"],
                              capture_output=True, text=True, check=True).stdout.strip()
    out = subprocess.run([PSQL, "-h", "127.0.0.1", "-p", str(DATABASE_PORT), "-U", "stratus", "-d", "stratus", "-tAc", sql],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"psql failed: {out.stderr.strip()}")
    return out.stdout.strip()


class Stack:
    """The broker, stratus-api and the workers, as processes this script starts and kills."""

    def __init__(self, log_suffix=""):
        self.log_suffix = log_suffix  # a second stack's logs beside the first's (backup-restore)
        self.processes = {}
        self.metrics_ports = {}  # worker process name -> the port of its /metrics
        self.broker_port = free_port()
        self.http_port = free_port()
        self.env = dict(os.environ)
        self.env.update({
            "STRATUS_KAFKA_BROKERS": f"127.0.0.1:{self.broker_port}",
            "STRATUS_HTTP_HOST": "127.0.0.1",
            "STRATUS_HTTP_PORT": str(self.http_port),
            "STRATUS_LOG_LEVEL": os.environ.get("STRATUS_DRILL_LOG_LEVEL", "warning"),
            "STRATUS_TOPIC_PARTITIONS": "4",
        })

    def cli(self, *arguments):
        out = subprocess.run([f"{BIN}/stratus", *arguments], env=self.env, capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"stratus {' '.join(arguments)} failed: {out.stderr.strip()[-400:]}")
        return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""

    def start(self, name, extra_env=None, binary=None):
        """Starts a process under `name`: the broker, or `binary` (default: `name`) from the build."""
        env = dict(self.env)
        env.update(extra_env or {})
        if name == "broker":
            command = [TANSU, "broker", "--listener-url", f"tcp://127.0.0.1:{self.broker_port}",
                       "--advertised-listener-url", f"tcp://127.0.0.1:{self.broker_port}"]
        else:
            command = [f"{BIN}/{binary or name}"]
        if (binary or name) in WORKERS:
            self.metrics_ports.setdefault(name, free_port())
            env["STRATUS_METRICS_PORT"] = str(self.metrics_ports[name])
        logfile = open(os.path.join(WORK, f"{name}{self.log_suffix}.log"), "a")
        self.processes[name] = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=logfile, stderr=logfile)
        if name == "broker":
            wait_until("the broker", lambda: accepts(self.broker_port), 30)
        elif (binary or name) == "stratus-api":
            port = int(env["STRATUS_HTTP_PORT"])
            wait_until(name, lambda: self.health(port), 60)

    def health(self, port=None):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port or self.http_port}/health", timeout=2) as response:
                return response.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def running(self, name):
        process = self.processes.get(name)
        return process is not None and process.poll() is None

    def kill(self, name, sig=signal.SIGKILL):
        process = self.processes.pop(name, None)
        if process and process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                # Says which process held a drill up (a slow exit costs the drill these 30 s).
                path = os.path.join(WORK, f"{name}{self.log_suffix}.log")
                log(f"{name} did not exit within 30 s of signal {int(sig)}; killing it. The end of its log ({path}):")
                with open(path, errors="replace") as logfile:
                    for line in logfile.readlines()[-20:]:
                        log("  " + line.rstrip())
                process.kill()
                process.wait()

    def stop_all(self):
        # The broker last, as an operator stops a stack: a worker told to stop while its broker is
        # already gone can wait on it (stratus-shares outlived the 30 s above in a CI run of
        # 2026-12-07, its log full of refused connections), which is not what the drills judge and
        # cost that teardown its 30 s.
        for name in sorted(self.processes, key=lambda name: name == "broker"):
            self.kill(name, signal.SIGTERM if name != "broker" else signal.SIGKILL)


def metric(port, name):
    """The sum of a metric's series on a process's /metrics, or None when it cannot be read."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except (OSError, urllib.error.URLError):
        return None
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name) and line[len(name):len(name) + 1] in ("{", " ")]
    return sum(values) if values else None


class Client:
    def __init__(self, stack, api_token, web_token, port=None):
        self.stack = stack
        self.port = port
        self.api_token, self.web_token = api_token, web_token
        self.query = f"ckAPIToken={api_token}&ckWebAuthToken={web_token}"

    def at(self, port):
        """The same user, through the stratus-api on `port`."""
        return Client(self.stack, self.api_token, self.web_token, port)

    def post(self, operation, body, database="private"):
        """(status, body, seconds); status 0 for no answer (connection refused or reset), -1 for no answer in 30 s."""
        url = f"http://127.0.0.1:{self.port or self.stack.http_port}/database/1/{CONTAINER}/development/{database}/{operation}?{self.query}"
        data = json.dumps(body).encode()
        started = time.monotonic()
        try:
            request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"{}"), time.monotonic() - started
        except urllib.error.HTTPError as error:
            try:
                payload = json.loads(error.read() or b"{}")
            except ValueError:
                payload = {}
            return error.code, payload, time.monotonic() - started
        except socket.timeout:
            return -1, {}, time.monotonic() - started
        except (urllib.error.URLError, ConnectionError, OSError) as error:
            if isinstance(getattr(error, "reason", None), socket.timeout):
                return -1, {}, time.monotonic() - started
            return 0, {}, time.monotonic() - started


class Tally:
    """What the clients were told."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sent = self.acknowledged = self.retryable = self.unreachable = self.bad = self.hung = 0
        self.bad_examples = []

    def record(self, status, body):
        with self.lock:
            self.sent += 1
            if status == 200 and not any("serverErrorCode" in entry for entry in body.get("records", [])):
                self.acknowledged += 1
                return True
            records = body.get("records", [])
            retryable = (status == 503 and body.get("serverErrorCode") == "TRY_AGAIN_LATER" and "retryAfter" in body) or (
                status == 200 and all(entry.get("serverErrorCode") in (None, "TRY_AGAIN_LATER", "ATOMIC_ERROR") for entry in records))
            if status == 0:
                self.unreachable += 1
            elif status == -1:
                self.hung += 1
            elif retryable:
                self.retryable += 1
            else:
                self.bad += 1
                if len(self.bad_examples) < 3:
                    self.bad_examples.append((status, json.dumps(body)[:300]))
            return False


def write_load(client, zones, tally, stop, batches, batch_size=5, atomic=True):
    """One writer per zone: atomic batches of new records until `stop` is set."""
    def writer(zone):
        index = 0
        while not stop.is_set():
            names = [f"b{index}-r{j}" for j in range(batch_size)]
            sent = time.monotonic()
            status, body, _ = client.post("records/modify", {
                "zoneID": {"zoneName": zone}, "atomic": atomic,
                "operations": [{"operationType": "create", "record": {"recordName": n, "recordType": "Drill", "fields": {"n": {"value": index}}}} for n in names],
            })
            answered = time.monotonic()
            acknowledged = tally.record(status, body)
            with tally.lock:
                batches.append((zone, names, acknowledged, sent, answered))
            index += 1
            if status in (0, 503):
                time.sleep(0.05)  # pacing: a client backs off before it retries
    threads = [threading.Thread(target=writer, args=(zone,), daemon=True) for zone in zones]
    for thread in threads:
        thread.start()
    return threads


def start_load(client, prefix, zone_count=4, batch_size=5):
    """Creates `zone_count` zones and starts one writer per zone; returns the load to `finish`."""
    zones = [f"{prefix}{i}" for i in range(zone_count)]
    client.post("zones/modify", {"operations": [{"operationType": "create", "zone": {"zoneID": {"zoneName": z}}} for z in zones]})
    tally, stop, batches = Tally(), threading.Event(), []
    threads = write_load(client, zones, tally, stop, batches, batch_size=batch_size)
    return tally, stop, batches, threads


def finish(load):
    """Stops the writers and waits for them."""
    _, stop, _, threads = load
    stop.set()
    for thread in threads:
        thread.join(60)


def differs_from_replay(stack, drill, failures):
    """1 (and a failure of `drill`) when the live index is not what a fresh replay of the event log builds, else 0."""
    live = index_state()
    stack.kill("stratus-indexer", signal.SIGTERM)
    stack.cli("replay", "stratus-indexer")
    replayed = index_state()
    stack.start("stratus-indexer")
    if live != replayed:
        failures.append(f"{drill}: the index differs from a fresh replay")
    return int(live != replayed)


def converge(timeout):
    """Waits until every event is published and the indexer has applied them all."""
    wait_until("every event to be published", lambda: psql("SELECT count(*) FROM unpublished_events") == "0", timeout)
    wait_until("the indexer to converge", lambda: workers_caught_up(["stratus-indexer"]), timeout)


def check_batches(client, batches):
    """(lost, partial): acknowledged batches not fully stored, batches stored in part."""
    present = stored_records(client, batches)
    lost = partial = 0
    for zone, names, acknowledged, *_ in batches:
        stored = sum((zone, n) in present for n in names)
        if acknowledged and stored != len(names):
            lost += 1
        if 0 < stored < len(names):
            partial += 1
    return lost, partial


def stored_records(client, batches):
    """The (zone, record name) pairs of `batches` that records/lookup finds."""
    by_zone = {}
    for zone, names, *_ in batches:
        by_zone.setdefault(zone, []).extend(names)
    present = set()
    for zone, names in by_zone.items():
        for start in range(0, len(names), 200):
            chunk = names[start:start + 200]
            status, body, _ = client.post("records/lookup", {"zoneID": {"zoneName": zone}, "records": [{"recordName": n} for n in chunk]})
            if status != 200:
                raise RuntimeError(f"lookup failed after the drill: {status} {body}")
            for record in body.get("records", []):
                if "serverErrorCode" not in record:
                    present.add((zone, record["recordName"]))
    return present


DUPLICATES_TRIGGER = """
CREATE TABLE IF NOT EXISTS drill_index_writes (generation text, record text, version bigint);
CREATE OR REPLACE FUNCTION drill_index_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO drill_index_writes VALUES (NEW.generation::text,
        concat_ws('/', NEW.container, NEW.environment, NEW.scope, NEW.owner, NEW.zone_name, NEW.record_name), NEW.version);
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS drill_index_write ON query_index.records;
CREATE TRIGGER drill_index_write AFTER INSERT OR UPDATE ON query_index.records FOR EACH ROW EXECUTE FUNCTION drill_index_write();
"""


def duplicate_effects():
    """Record versions written to the query index more than once (each event's effect is one such write)."""
    return int(psql("""SELECT count(*) FROM (SELECT 1 FROM drill_index_writes GROUP BY generation, record, version
                       HAVING count(*) > 1) twice""") or 0)


def index_state():
    return psql("""SELECT md5(string_agg(concat_ws('|', container, environment, scope, owner, zone_name, record_name, version, deleted, record::text), ',' ORDER BY container, environment, scope, owner, zone_name, record_name))
                   FROM query_index.records r JOIN query_index.generations g ON g.generation = r.generation AND g.state = 'live'""")


def workers_caught_up(workers):
    last = int(psql("SELECT coalesce(max(id), 0) FROM events") or 0)
    for worker in workers:
        behind = psql(f"""SELECT count(*) FROM zones z WHERE z.change_counter > coalesce((SELECT last_sequence FROM worker_checkpoints c
                          WHERE c.worker = '{worker}' AND c.zone_key = concat_ws('/', z.container, z.environment, z.scope, z.owner, z.zone_name)), 0)""")
        if behind != "0":
            return False
    return last > 0


def report(name, tally, extra, failures):
    figures = {"sent": tally.sent, "acknowledged": tally.acknowledged, "retryable": tally.retryable,
               "unreachable": tally.unreachable, "5xx/other": tally.bad, "hung": tally.hung}
    figures.update(extra)
    log(f"{name}: " + ", ".join(f"{key} {value}" for key, value in figures.items()))
    if tally.bad_examples:
        log(f"{name}: unexpected answers, e.g. {tally.bad_examples}")
    if tally.bad or tally.hung:
        failures.append(f"{name}: {tally.bad} unexpected answers, {tally.hung} hung requests")
    for key in ("lost", "partial", "duplicate effects"):
        if extra.get(key, 0):
            failures.append(f"{name}: {extra[key]} {key}")
    return figures


def drill_api_kill(stack, client, failures):
    """SIGKILL stratus-api during atomic batches; restart it."""
    load = start_load(client, "ApiKill")
    tally, _, batches, _ = load
    time.sleep(2)  # load runs before the fault
    stack.kill("stratus-api")
    killed = time.monotonic()
    stack.start("stratus-api")
    recovered = time.monotonic() - killed
    time.sleep(2)  # and after it
    finish(load)
    lost, partial = check_batches(client, batches)
    return report("api-kill", tally, {"lost": lost, "partial": partial, "restart s": round(recovered, 1)}, failures)


def drill_worker_kill(stack, client, failures):
    """SIGKILL every worker mid-load; restart them; their state must equal a fresh replay."""
    load = start_load(client, "WorkerKill")
    tally, _, batches, _ = load
    time.sleep(1.5)
    for worker in WORKERS:
        stack.kill(worker)
    time.sleep(1)  # events pile up while the workers are down
    for worker in WORKERS:
        stack.start(worker)
    time.sleep(1.5)
    finish(load)
    started = time.monotonic()
    wait_until("the workers to catch up", lambda: workers_caught_up(["stratus-indexer", "stratus-gc"]), 120)
    caught_up = time.monotonic() - started
    differs = differs_from_replay(stack, "worker-kill", failures)
    lost, partial = check_batches(client, batches)
    return report("worker-kill", tally, {"lost": lost, "partial": partial, "catch-up s": round(caught_up, 1), "differs from replay": differs,
                                         "duplicate effects": duplicate_effects()}, failures)


def drill_broker_restart(stack, client, failures):
    """The broker killed and restarted empty under load: no event lost."""
    load = start_load(client, "Broker")
    tally, _, batches, _ = load
    time.sleep(1.5)
    stack.kill("broker")
    time.sleep(2)  # the broker is down for a while
    stack.start("broker")
    restarted = time.monotonic()
    time.sleep(2)
    finish(load)
    converge(180)
    converged = time.monotonic() - restarted
    differs = differs_from_replay(stack, "broker-restart", failures)
    lost, partial = check_batches(client, batches)
    return report("broker-restart", tally, {"lost": lost, "partial": partial, "converged s": round(converged, 1), "differs from replay": differs,
                                            "duplicate effects": duplicate_effects()}, failures)


def drill_pg_restart(stack, client, failures):
    """PostgreSQL restarted under load: retryable errors meanwhile, recovery without restarting Stratus."""
    load = start_load(client, "Postgres")
    tally, _, batches, _ = load
    time.sleep(1.5)
    subprocess.run(["bash", "-c", f'source "{ROOT}/scripts/lib.sh"; pg_stop "{WORK}/pg"; pg_start "{WORK}/pg" {PG_PORT} "{WORK}/postgres.log" -c max_connections=200'],
                   check=True, capture_output=True)
    restarted = time.monotonic()
    acknowledged_before = tally.acknowledged
    wait_until("a write to succeed after the restart", lambda: tally.acknowledged > acknowledged_before or not stack.running("stratus-api"), 60, 0.05)
    recovered = time.monotonic() - restarted
    time.sleep(1)
    finish(load)
    # The restart must cost retryable errors for a moment, never the process.
    survived = stack.running("stratus-api")
    if not survived:
        failures.append("pg-restart: stratus-api exited when PostgreSQL restarted (see stratus-api.log)")
        stack.start("stratus-api")
    lost, partial = check_batches(client, batches)
    return report("pg-restart", tally, {"lost": lost, "partial": partial, "recovery s": round(recovered, 1),
                                        "api survived": "yes" if survived else "NO"}, failures)


def drill_pool_exhausted(stack, client, failures):
    """Two pooled connections, many concurrent writers: TRY_AGAIN_LATER or success, never a hang."""
    stack.kill("stratus-api", signal.SIGTERM)
    stack.start("stratus-api", {"STRATUS_DATABASE_MAX_CONNECTIONS": "2", "STRATUS_DATABASE_LEASE_TIMEOUT_MS": "200"})
    load = start_load(client, "Pool", zone_count=24, batch_size=20)
    tally, _, batches, _ = load
    time.sleep(4)
    finish(load)
    stack.kill("stratus-api", signal.SIGTERM)
    stack.start("stratus-api")
    lost, partial = check_batches(client, batches)
    if tally.retryable == 0:
        log("pool-exhausted: the pool never ran out (no TRY_AGAIN_LATER); the drill proves only that nothing hung")
    # A small pool still serves: the listeners and the relay's lock hold connections of their own.
    if tally.acknowledged < tally.sent // 4:
        failures.append(f"pool-exhausted: only {tally.acknowledged} of {tally.sent} requests succeeded with two pooled connections")
    return report("pool-exhausted", tally, {"lost": lost, "partial": partial}, failures)


def drill_relay_takeover(stack, client, failures):
    """Two stratus-api processes: SIGKILL the one whose relay publishes; the other relay takes over."""
    second_port = free_port()
    stack.start("stratus-api-2", {"STRATUS_HTTP_PORT": str(second_port)}, binary="stratus-api")
    ports = {"stratus-api": stack.http_port, "stratus-api-2": second_port}
    standby = {}

    def one_leads():
        standby.update({name: metric(port, "stratus_relay_standby") for name, port in ports.items()})
        return sorted(standby.values(), key=str) == [0.0, 1.0]
    wait_until("one relay to publish and the other to stand by", one_leads, 60)
    leader = next(name for name, value in standby.items() if value == 0.0)
    survivor = next(name for name in ports if name != leader)
    log(f"relay-takeover: {leader}'s relay publishes; load goes through {survivor}")
    survivor_client = client.at(ports[survivor])
    load = start_load(survivor_client, "Takeover")
    tally, _, batches, _ = load
    time.sleep(1.5)
    stack.kill(leader)
    killed = time.monotonic()
    wait_until(f"{survivor}'s relay to take over", lambda: metric(ports[survivor], "stratus_relay_standby") == 0.0, 60, 0.05)
    takeover = time.monotonic() - killed
    time.sleep(1.5)
    finish(load)
    converge(120)
    converged = time.monotonic() - killed
    differs = differs_from_replay(stack, "relay-takeover", failures)
    lost, partial = check_batches(survivor_client, batches)
    # Back to one stratus-api on the usual port for the drills that follow.
    if survivor == "stratus-api-2":
        stack.start("stratus-api")
    stack.kill("stratus-api-2", signal.SIGTERM)
    return report("relay-takeover", tally, {"lost": lost, "partial": partial, "takeover s": round(takeover, 1),
                                            "converged s": round(converged, 1), "differs from replay": differs,
                                            "duplicate effects": duplicate_effects()}, failures)


def drill_worker_group(stack, client, failures):
    """A second process of each worker joins its consumer group under load: both share the partitions; SIGKILL the second, the first takes its partitions back."""
    def applied(name):
        return metric(stack.metrics_ports[name], "stratus_worker_applied_total") or 0
    load = start_load(client, "Group", zone_count=8)
    tally, _, batches, _ = load
    for worker in WORKERS:
        stack.start(f"{worker}-2", binary=worker)
    # Both indexers apply events from here on: the group shared the partitions between them.
    first_before = applied("stratus-indexer")
    wait_until("both indexers to apply events",
               lambda: applied("stratus-indexer-2") > 0 and applied("stratus-indexer") > first_before, 120)
    shared = {name: int(applied(name)) for name in ("stratus-indexer", "stratus-indexer-2")}
    for worker in WORKERS:
        stack.kill(f"{worker}-2")
    killed = time.monotonic()
    before = applied("stratus-indexer")
    time.sleep(1.5)  # load runs on after the kill
    finish(load)
    wait_until("the remaining workers to take over and catch up", lambda: workers_caught_up(["stratus-indexer", "stratus-gc"]), 180)
    caught_up = time.monotonic() - killed
    gained = applied("stratus-indexer") - before
    if gained <= 0:
        failures.append("worker-group: the remaining indexer applied nothing after the other was killed")
    differs = differs_from_replay(stack, "worker-group", failures)
    lost, partial = check_batches(client, batches)
    return report("worker-group", tally, {"lost": lost, "partial": partial, "applied while shared (first, second)": tuple(shared.values()),
                                          "take-over and catch-up s": round(caught_up, 1), "applied by the first after the kill": int(gained),
                                          "differs from replay": differs, "duplicate effects": duplicate_effects()}, failures)

DRILL_SUBSCRIPTION = "drill-subscriptions-kill"


def notification_check(zone_prefix):
    """(logged, missing, extra) for the drill's database subscription over the zones named
    `zone_prefix`…: it must fire exactly once per write request and zone (zone creations included),
    so every such pair of the event log is one notification, and no notification is anything else."""
    expected = f"""SELECT 'zone/' || split_part(zone_key, '/', 5) || '/request/' || (causation->>'requestID') FROM events
                   WHERE split_part(zone_key, '/', 5) LIKE '{zone_prefix}%' GROUP BY 1"""
    logged = f"SELECT dedupe_key FROM notifications WHERE subscription_id = '{DRILL_SUBSCRIPTION}'"
    return (int(psql(f"SELECT count(*) FROM ({logged}) l") or 0),
            int(psql(f"SELECT count(*) FROM ({expected} EXCEPT ALL {logged}) m") or 0),
            int(psql(f"SELECT count(*) FROM ({logged} EXCEPT ALL {expected}) e") or 0))


def notification_log():
    return psql(f"""SELECT md5(string_agg(concat_ws('|', notification_id, position, dedupe_key, payload::text), ',' ORDER BY position))
                    FROM notifications WHERE subscription_id = '{DRILL_SUBSCRIPTION}'""")


def drill_subscriptions_kill(stack, client, failures):
    """SIGKILL stratus-subscriptions mid-load; restart, then replay it: every notification logged exactly once."""
    status, body, _ = client.post("subscriptions/modify", {"operations": [
        {"operationType": "create", "subscription": {"subscriptionID": DRILL_SUBSCRIPTION, "subscriptionType": "database"}}]})
    if status != 200 or any("serverErrorCode" in entry for entry in body.get("subscriptions", [])):
        raise RuntimeError(f"the drill's subscription was refused: {status} {body}")
    load = start_load(client, "SubsKill")
    tally, _, batches, _ = load
    # Killed while it applies the load: once it has logged some of it. After broker-restart the
    # worker rejoins its consumer group, which this broker may hold for minutes (its zones are then
    # caught up by reconciliation, a zone every second or two): so up to five minutes.
    wait_until("stratus-subscriptions to log notifications", lambda: notification_check("SubsKill")[0] > 0, 300)
    stack.kill("stratus-subscriptions")
    at_kill = notification_check("SubsKill")[0]
    time.sleep(1)  # events pile up while the worker is down
    stack.start("stratus-subscriptions")
    time.sleep(1.5)
    finish(load)
    started = time.monotonic()
    wait_until("stratus-subscriptions to catch up", lambda: workers_caught_up(["stratus-subscriptions"]), 120)
    caught_up = time.monotonic() - started
    logged, missing, extra = notification_check("SubsKill")
    before = notification_log()
    stack.kill("stratus-subscriptions", signal.SIGTERM)
    stack.cli("replay", "stratus-subscriptions")
    stack.start("stratus-subscriptions")
    _, missing_after, extra_after = notification_check("SubsKill")
    changed = int(notification_log() != before)
    for figure, count in (("missing notifications", missing + missing_after), ("extra or repeated notifications", extra + extra_after),
                          ("notification logs changed by the replay", changed)):
        if count:
            failures.append(f"subscriptions-kill: {count} {figure}")
    lost, partial = check_batches(client, batches)
    return report("subscriptions-kill", tally, {"lost": lost, "partial": partial, "logged at the kill": at_kill, "notifications": logged,
                                                "missing": missing + missing_after, "extra": extra + extra_after,
                                                "changed by replay": changed, "catch-up s": round(caught_up, 1)}, failures)


def lib(script):
    """Runs `script` in bash with scripts/lib.sh's functions (pg_start, as_pg_owner, …); fails when it fails."""
    out = subprocess.run(["bash", "-c", f'set -euo pipefail; source "{ROOT}/scripts/lib.sh"; {script}'], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{script.strip()[:80]} failed: {(out.stderr or out.stdout).strip()[-600:]}")
    return out.stdout.strip()


def upload_asset(client, zone, record_name, data):
    """Uploads `data` and saves it in a new record's asset field; raises unless both are acknowledged."""
    status, body, _ = client.post("assets/upload", {"zoneID": {"zoneName": zone}, "tokens": [
        {"recordType": "DrillFile", "recordName": record_name, "fieldName": "file"}]})
    if status != 200:
        raise RuntimeError(f"assets/upload failed: {status} {body}")
    request = urllib.request.Request(body["tokens"][0]["url"], data=data, method="POST",
                                     headers={"Content-Type": "application/octet-stream"})
    with urllib.request.urlopen(request, timeout=30) as response:
        single = json.loads(response.read())["singleFile"]
    status, body, _ = client.post("records/modify", {"zoneID": {"zoneName": zone}, "operations": [{"operationType": "create", "record": {
        "recordName": record_name, "recordType": "DrillFile", "fields": {"file": {"value": single, "type": "ASSETID"}}}}]})
    if status != 200 or any("serverErrorCode" in entry for entry in body.get("records", [])):
        raise RuntimeError(f"saving the asset's record failed: {status} {body}")


def downloaded_asset(client, zone, record_name):
    """The bytes of the record's asset, None when the record is not there."""
    status, body, _ = client.post("records/lookup", {"zoneID": {"zoneName": zone}, "records": [{"recordName": record_name}]})
    records = body.get("records", [])
    if status != 200 or not records or "serverErrorCode" in records[0]:
        return None
    with urllib.request.urlopen(records[0]["fields"]["file"]["value"]["downloadURL"], timeout=30) as response:
        return response.read()


def copy_blobs(source, destination):
    """Copies the filesystem blob store additively: new files only, never removing one (a blob's bytes never change)."""
    for folder, _, files in os.walk(source):
        target = os.path.join(destination, os.path.relpath(folder, source))
        os.makedirs(target, exist_ok=True)
        for name in files:
            if not os.path.exists(os.path.join(target, name)):
                shutil.copy2(os.path.join(folder, name), os.path.join(target, name))


def topic_event_ids(brokers, topic, expected, timeout):
    """The event ids the topic holds, read from the beginning of every partition (no consumer group),
    until every id of `expected` was read or `timeout` seconds passed."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": brokers, "group.id": "stratus-drill-reader", "enable.auto.commit": False})
    seen = set()
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + timeout
        while not expected <= seen and time.monotonic() < deadline:
            for message in consumer.consume(500, 1.0):
                if message.error() is None:
                    seen.add(json.loads(message.value())["id"])
    finally:
        consumer.close()
    return seen


RESTORE_SETTINGS = """
archive_mode = off
restore_command = 'cp {archive}/%f %p'
recovery_target_name = 'drill-t'
recovery_target_action = 'promote'
"""


def restore_cluster(base, archive, directory, port):
    """A new cluster from the base backup that replays the WAL archive up to the restore point, then promotes."""
    with open(os.path.join(WORK, "restore.conf"), "w") as settings:
        settings.write(RESTORE_SETTINGS.format(archive=archive))
    lib(f'cp -a "{base}" "{directory}"; chmod 700 "{directory}"; cat "{WORK}/restore.conf" >>"{directory}/postgresql.conf"; '
        f'touch "{directory}/recovery.signal"; give_to_pg_owner "{directory}/recovery.signal"; '
        f'pg_start "{directory}" {port} "{WORK}/postgres-restored.log" -c max_connections=200')


def drill_backup_restore(stack, client, failures):
    """Base backup under load, restore point T, more load; restored to T (new cluster, blob copy, empty broker)."""
    global DATABASE_PORT
    archive = os.environ["STRATUS_DRILL_WAL_ARCHIVE"]
    base, blob_backup = os.path.join(WORK, "base-backup"), os.path.join(WORK, "blob-backup")
    assets = stack.env.get("STRATUS_ASSET_DIR") or os.path.join(os.environ["STRATUS_DATA_DIR"], "assets")
    files = {name: os.urandom(4096) for name in ("asset-before-backup", "asset-before-t", "asset-after-t")}
    load = start_load(client, "Backup")
    tally, _, batches, _ = load
    upload_asset(client, "Backup0", "asset-before-backup", files["asset-before-backup"])
    time.sleep(1.5)  # load before the base backup
    started = time.monotonic()
    lib(f'as_pg_owner "$(pg_bin_dir)/pg_basebackup" -h 127.0.0.1 -p {PG_PORT} -U stratus -D "{base}" -X stream -c fast')
    copy_blobs(assets, blob_backup)  # the blob store, copied alongside
    backup_seconds = time.monotonic() - started
    upload_asset(client, "Backup1", "asset-before-t", files["asset-before-t"])
    time.sleep(1.5)  # load between the backup and T
    marking = time.monotonic()
    psql("SELECT pg_create_restore_point('drill-t')")
    marked = time.monotonic()
    upload_asset(client, "Backup2", "asset-after-t", files["asset-after-t"])
    time.sleep(1.5)  # load after T
    finish(load)
    copy_blobs(assets, blob_backup)  # copied again after T: it holds every blob T's records name
    # The segment holding T (and the load after it) is archived: switch to the next one and wait for the archiver.
    segment = psql("SELECT pg_walfile_name(pg_switch_wal())")
    wait_until("the WAL segment with the restore point to be archived", lambda: os.path.exists(os.path.join(archive, segment)), 60)

    restored_dir, restored_port = os.path.join(WORK, "pg-restored"), free_port()
    restored_assets = os.path.join(WORK, "assets-restored")
    started = time.monotonic()
    restore_cluster(base, archive, restored_dir, restored_port)
    shutil.copytree(blob_backup, restored_assets)
    DATABASE_PORT = restored_port
    restored = Stack(log_suffix="-restored")
    restored.env.update({"STRATUS_DATABASE_URL": f"postgres://stratus@127.0.0.1:{restored_port}/stratus", "STRATUS_ASSET_DIR": restored_assets})
    try:
        wait_until("the restored cluster to promote", lambda: psql("SELECT pg_is_in_recovery()") == "f", 120)
        restore_seconds = time.monotonic() - started
        # Stratus on the restored database, with a new, empty broker.
        restored.start("broker")
        restored.start("stratus-api")
        for worker in WORKERS:
            restored.start(worker)
        again = client.at(restored.http_port)
        # The relay finds the broker emptier than the restored database says it left it, and publishes the log again.
        wait_until("the relay to publish the event log again",
                   lambda: (metric(restored.http_port, "stratus_relay_topic_refills_total") or 0) >= 1, 60)
        # The restored deployment takes writes (and the indexer applies them before the index is compared).
        status, body, _ = again.post("records/modify", {"zoneID": {"zoneName": "Backup0"}, "operations": [
            {"operationType": "create", "record": {"recordName": "after-restore", "recordType": "Drill", "fields": {"n": {"value": 1}}}}]})
        if status != 200 or any("serverErrorCode" in entry for entry in body.get("records", [])):
            failures.append(f"backup-restore: a write to the restored deployment failed: {status} {json.dumps(body)[:300]}")
        converge(180)
        expected = {int(i) for i in psql("SELECT id FROM events WHERE publish_error IS NULL").split()}
        on_broker = topic_event_ids(restored.env["STRATUS_KAFKA_BROKERS"], "stratus.zone-events", expected, 60)
        present = stored_records(again, batches)
        before = [b for b in batches if b[2] and b[4] < marking]  # acknowledged before T was marked
        after = [b for b in batches if b[3] > marked]  # sent after T was marked
        lost = sum(any((b[0], n) not in present for n in b[1]) for b in before)
        resurrected = sum(any((b[0], n) in present for n in b[1]) for b in after)
        partial = sum(0 < sum((b[0], n) in present for n in b[1]) < len(b[1]) for b in batches)
        kept = {name: downloaded_asset(again, zone, name) for name, zone in
                (("asset-before-backup", "Backup0"), ("asset-before-t", "Backup1"), ("asset-after-t", "Backup2"))}
        assets_lost = sum(kept[name] != files[name] for name in ("asset-before-backup", "asset-before-t"))
        known = set(psql("SELECT asset_id::text FROM assets").split())
        stray = sum(name not in known for _, _, names in os.walk(restored_assets) for name in names)
        differs = differs_from_replay(restored, "backup-restore", failures)
        duplicates = duplicate_effects()
    finally:
        restored.stop_all()
        DATABASE_PORT = PG_PORT
        lib(f'pg_stop "{restored_dir}"')
    for figure, count in (("acknowledged batches before T missing", lost), ("batches sent after T present", resurrected),
                          ("assets acknowledged before T missing or changed", assets_lost),
                          ("events missing from the rebuilt broker", len(expected - on_broker)),
                          ("asset saved after T present", int(kept["asset-after-t"] is not None))):
        if count:
            failures.append(f"backup-restore: {count} {figure}")
    return report("backup-restore", tally, {"before T": len(before), "after T": len(after), "across T": len(batches) - len(before) - len(after),
                                            "lost": lost, "after T present": resurrected, "partial": partial,
                                            "events republished": len(expected & on_broker), "missing from broker": len(expected - on_broker),
                                            "assets kept": 2 - assets_lost, "stray blobs": stray, "base backup s": round(backup_seconds, 1),
                                            "restore s": round(restore_seconds, 1), "differs from replay": differs,
                                            "duplicate effects": duplicates}, failures)


DRILLS = {
    "api-kill": drill_api_kill,
    "worker-kill": drill_worker_kill,
    "broker-restart": drill_broker_restart,
    "pg-restart": drill_pg_restart,
    "pool-exhausted": drill_pool_exhausted,
    "relay-takeover": drill_relay_takeover,
    # Before worker-group, which ends with consumer groups rebalancing: the broker may hold a
    # group's rebalance for minutes (docs/reliability.md), during which a later drill's worker
    # receives nothing.
    "subscriptions-kill": drill_subscriptions_kill,
    "worker-group": drill_worker_group,
    # Last: while it runs, a second cluster and stack stand beside the first, which it leaves as it was.
    "backup-restore": drill_backup_restore,
}


def main():
    names = sys.argv[1:]
    if names == ["--list"]:
        print("\n".join(DRILLS))
        return 0
    unknown = [n for n in names if n not in DRILLS]
    if unknown:
        log(f"unknown drill(s): {', '.join(unknown)}; known: {', '.join(DRILLS)}")
        return 2
    stack = Stack()
    failures = []
    try:
        stack.cli("migrate")
        psql(DUPLICATES_TRIGGER)
        api_token = stack.cli("container", "create", CONTAINER, "--label", "drills")
        web_token = stack.cli("user", "token", CONTAINER, "--user", "_drill", "--days", "1")
        stack.start("broker")
        stack.start("stratus-api")
        for worker in WORKERS:
            stack.start(worker)
        client = Client(stack, api_token, web_token)
        for name in names or list(DRILLS):
            log(f"drill {name}: {DRILLS[name].__doc__}")
            DRILLS[name](stack, client, failures)
    finally:
        stack.stop_all()
    if failures:
        for failure in failures:
            log(f"FAILED {failure}")
        return 1
    log("every drill passed: nothing acknowledged was lost, no batch was stored in part, no request hung")
    return 0


if __name__ == "__main__":
    sys.exit(main())
