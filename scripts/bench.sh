#!/usr/bin/env bash
# Runs the benchmark suite (docs/benchmarks.md): installs what is missing, builds in release mode,
# starts a private PostgreSQL and broker on free ports, migrates, creates a container and a user,
# runs stratus-api and every worker, drives them with stratus-bench (its arguments pass through,
# e.g. --seconds 4, --only idle,lag, or --scale for the scale run instead of the suite), which also
# reads each process's CPU (idle and under load) and peak memory, and stops everything it started,
# also on failure. STRATUS_* settings of the environment reach the API (STRATUS_MAX_RESULTS: the
# page of sync.10000.max).
#
# The report goes to $STRATUS_BENCH_DIR (default .stratus/bench/): report.json, the table in
# report.txt, and the servers' logs.
#
# Settings (environment):
#   STRATUS_BENCH_DIR      where the report and logs go
#   STRATUS_BENCH_PROFILE  1: record a CPU profile of stratus-api (perf: stratus-api.perf.txt) and
#                          PostgreSQL's statement statistics (statements.txt: the 40 statements that
#                          took the most time, with calls, rows, time and WAL) into the report folder
#   STRATUS_BENCH_SCHEMA   the schema imported into development before the run (default
#                          scripts/bench-schema.ckdb; scripts/bench-schema-ten.ckdb indexes all ten
#                          of Item's fields; none: no schema, so no field indexes)
#   STRATUS_BENCH_ITEM_FIELDS  fields of each query-zone record: 3 (default, the reference
#                          workload) or 10 (for the cost of ten field indexes)
#   STRATUS_BENCH_HOLD     1: after the suite, keep the stack running for inspection (the database
#                          URL is printed) until the file named in the log is removed
#   STRATUS_BENCH_SOCKET   1: every process reaches PostgreSQL over its Unix-domain socket (the
#                          database URL's ?host=, as a one-machine deployment may), not the
#                          loopback's TCP (default)
#   STRATUS_BUILD          release (default) or debug
#   STRATUS_BENCH_BIN      a folder with the stack's binaries to measure instead of this build's
#                          (stratus, stratus-api, the workers; e.g. an earlier commit's, for an A/B;
#                          then only the load generator, stratus-bench, is built here);
#                          a migrations/ folder beside them is migrated instead of this tree's
#   STRATUS_LOG_LEVEL      of every process (default: warning for the API, whose request logs cost
#                          CPU, and info, a deployment's default, for the workers)
#   STRATUS_BENCH_CHURN_RECORDS  records storage.churn writes and updates ten times (default
#                          100,000; e.g. 5000 for a quick run); run it with --only storage. The
#                          stack's log partitions (STRATUS_EVENT_PARTITION_EVENTS) span that many ids
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$STRATUS_ROOT"

BUILD="${STRATUS_BUILD:-release}"
case "$BUILD" in
    release | debug) ;;
    *) die "STRATUS_BUILD must be release or debug, not '$BUILD'" ;;
esac
OUT="${STRATUS_BENCH_DIR:-$STRATUS_ROOT/.stratus/bench}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
CONTAINER="iCloud.dev.stratus.bench"

"$STRATUS_ROOT/scripts/install-deps.sh"
ensure_swift_on_path || die "swift is not on PATH"
log "building ($BUILD)"
swift build -c "$BUILD" --product stratus-bench
# With STRATUS_BENCH_BIN the stack's binaries come from there: only the load generator is built.
if [[ -z "${STRATUS_BENCH_BIN:-}" ]]; then
    swift build -c "$BUILD"
fi
BIN="$(swift build -c "$BUILD" --show-bin-path)"
BENCH_BIN="$BIN"
if [[ -n "${STRATUS_BENCH_BIN:-}" ]]; then
    # The stack's binaries from elsewhere (e.g. an earlier commit's, for an A/B); the load
    # generator stays this build's.
    BIN="$STRATUS_BENCH_BIN"
fi
WORKERS=(stratus-indexer stratus-subscriptions stratus-gc stratus-shares)
for executable in stratus stratus-api "${WORKERS[@]}"; do
    [[ -x "$BIN/$executable" ]] || die "no $BIN/$executable"
done
[[ -x "$BENCH_BIN/stratus-bench" ]] || die "the build did not produce $BENCH_BIN/stratus-bench"

work=""
pg_dir=""
PG_PID=""
TANSU_PID=""
API_PID=""
declare -A WORKER_PIDS=()
PERF_PID=""
# shellcheck disable=SC2317 # invoked by the trap
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    if [[ -n "$PERF_PID" ]]; then
        kill -INT "$PERF_PID" 2>/dev/null || true
        wait "$PERF_PID" 2>/dev/null || true
    fi
    local worker
    for worker in "${!WORKER_PIDS[@]}"; do
        stop_pid "${WORKER_PIDS[$worker]}" "$worker" 20
    done
    stop_pid "$API_PID" stratus-api 20
    if [[ -n "$TANSU_PID" ]]; then
        tansu_stop "$TANSU_PID"
    fi
    if [[ -n "$pg_dir" ]]; then
        pg_stop "$pg_dir" "$PG_PID"
    fi
    if [[ -n "$work" && -d "$work" ]]; then
        cp -f "$work/postgres.log" "$work/broker.log" "$OUT/" 2>/dev/null || true
        rm -rf "$work"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

work="$(mktemp -d "${TMPDIR:-/tmp}/stratus-bench.XXXXXX")"
chmod 755 "$work"
give_to_pg_owner "$work"
pg_dir="$work/pg"

# PostgreSQL with its durable defaults (fsync and synchronous commit on), as an operator runs it.
PROFILE="${STRATUS_BENCH_PROFILE:-0}"
SCHEMA="${STRATUS_BENCH_SCHEMA:-$STRATUS_ROOT/scripts/bench-schema.ckdb}"
pg_options=(-c max_connections=200 -c shared_buffers=256MB)
if [[ "$PROFILE" == 1 ]]; then
    command -v perf >/dev/null 2>&1 || die "STRATUS_BENCH_PROFILE=1 needs perf (apt: linux-perf)"
    pg_options+=(-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all -c pg_stat_statements.track_planning=on)
fi
pg_init "$pg_dir"
pg_port="$(free_port)"
pg_start "$pg_dir" "$pg_port" "$work/postgres.log" "${pg_options[@]}" || die "PostgreSQL did not start"
pg_create_database "$pg_port" stratus
if [[ "$PROFILE" == 1 ]]; then
    "$(pg_bin_dir)/psql" -h 127.0.0.1 -p "$pg_port" -U stratus -d stratus -qc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
fi

broker_port="$(free_port)"
tansu_start "$broker_port" "$work/broker.log" || die "the broker did not start"
"$(tansu_path)" topic create stratus.zone-events --partitions 8 --broker "tcp://127.0.0.1:$broker_port" >>"$work/broker.log" 2>&1 ||
    log "topic not created here (the relay creates it)"

http_port="$(free_port)"
STRATUS_DATABASE_URL="postgres://stratus@127.0.0.1:$pg_port/stratus"
if [[ "${STRATUS_BENCH_SOCKET:-0}" == 1 ]]; then
    [[ -S "$pg_dir/.s.PGSQL.$pg_port" ]] || die "PostgreSQL has no socket in $pg_dir (its path is too long for one)"
    STRATUS_DATABASE_URL="postgres://stratus@/stratus?host=$pg_dir&port=$pg_port"
fi
STRATUS_KAFKA_BROKERS="127.0.0.1:$broker_port"
STRATUS_DATA_DIR="$work/data"
# The migrations of the stack measured: those beside STRATUS_BENCH_BIN's binaries when it has them
# (an earlier commit's, for an A/B), else this tree's.
STRATUS_MIGRATIONS_DIR="$STRATUS_ROOT/migrations"
if [[ -d "$BIN/migrations" ]]; then
    STRATUS_MIGRATIONS_DIR="$BIN/migrations"
fi
STRATUS_HTTP_HOST=127.0.0.1
STRATUS_HTTP_PORT="$http_port"
API_LOG_LEVEL="${STRATUS_LOG_LEVEL:-warning}"
WORKER_LOG_LEVEL="${STRATUS_LOG_LEVEL:-info}"
# The event log's partitions span one round of storage.churn (STRATUS_BENCH_CHURN_RECORDS records,
# 100,000 by default; at least 1,000 ids), so its retention passes have whole partitions to drop.
churn_records="${STRATUS_BENCH_CHURN_RECORDS:-100000}"
STRATUS_EVENT_PARTITION_EVENTS="${STRATUS_EVENT_PARTITION_EVENTS:-$((churn_records < 1000 ? 1000 : churn_records))}"
export STRATUS_DATABASE_URL STRATUS_KAFKA_BROKERS STRATUS_DATA_DIR STRATUS_MIGRATIONS_DIR STRATUS_HTTP_HOST STRATUS_HTTP_PORT STRATUS_EVENT_PARTITION_EVENTS
mkdir -p "$STRATUS_DATA_DIR"

"$BIN/stratus" migrate >/dev/null
# Locally generated secrets of this run only; the folder is removed when the run ends.
(
    umask 077
    "$BIN/stratus" container create "$CONTAINER" --label "benchmark (scripts/bench.sh)" | tail -n 1 >"$work/api-token"
    "$BIN/stratus" user token "$CONTAINER" --user _bench --days 1 | tail -n 1 >"$work/web-auth-token"
)
# The schema the query scenarios run under: its QUERYABLE and SORTABLE fields get field indexes.
if [[ "$SCHEMA" != none ]]; then
    "$BIN/stratus" schema import "$CONTAINER" "$SCHEMA" | sed 's/^/[bench] /'
fi

STRATUS_LOG_LEVEL="$API_LOG_LEVEL" "$BIN/stratus-api" </dev/null >"$OUT/stratus-api.log" 2>&1 &
API_PID=$!
watched=(--process "stratus-api=$API_PID")
for worker in "${WORKERS[@]}"; do
    STRATUS_LOG_LEVEL="$WORKER_LOG_LEVEL" "$BIN/$worker" </dev/null >"$OUT/$worker.log" 2>&1 &
    WORKER_PIDS[$worker]=$!
    watched+=(--process "$worker=$!")
done
if [[ -n "$PG_PID" ]]; then
    watched+=(--process "postgres=$PG_PID")
fi
watched+=(--process "broker=$TANSU_PID")
if ! wait_for_port "$http_port" "$API_PID" 60; then
    show_log_tail "$OUT/stratus-api.log"
    die "stratus-api did not start"
fi

if [[ "$PROFILE" == 1 ]]; then
    perf record -e cpu-clock -F 499 -g -p "$API_PID" -o "$OUT/stratus-api.perf.data" >/dev/null 2>&1 &
    PERF_PID=$!
    log "profiling stratus-api (pid $API_PID) into $OUT/stratus-api.perf.data"
fi

log "running the suite (report: $OUT/report.json)"
"$BENCH_BIN/stratus-bench" --api-url "http://127.0.0.1:$http_port" --container "$CONTAINER" \
    --api-token-file "$work/api-token" --web-auth-token-file "$work/web-auth-token" --secret-key-file "$STRATUS_DATA_DIR/dev-secret-key" \
    --database-url "$STRATUS_DATABASE_URL" --item-fields "${STRATUS_BENCH_ITEM_FIELDS:-3}" --output "$OUT/report.json" "${watched[@]}" "$@" | tee "$OUT/report.txt"

if [[ "${STRATUS_BENCH_HOLD:-0}" == 1 ]]; then
    touch "$work/hold"
    log "holding the stack: $STRATUS_DATABASE_URL, http://127.0.0.1:$http_port; remove $work/hold to stop it"
    while [[ -e "$work/hold" ]]; do sleep 1; done
fi

if [[ "$PROFILE" == 1 ]]; then
    kill -INT "$PERF_PID" 2>/dev/null || true
    wait "$PERF_PID" 2>/dev/null || true
    PERF_PID=""
    perf report -i "$OUT/stratus-api.perf.data" --no-children --percent-limit 0.5 --stdio >"$OUT/stratus-api.perf.txt" 2>/dev/null || true
    "$(pg_bin_dir)/psql" -h 127.0.0.1 -p "$pg_port" -U stratus -d stratus -P pager=off -c "
        SELECT calls, plans, rows, round(total_exec_time::numeric, 1) AS total_ms, round(mean_exec_time::numeric, 3) AS mean_ms,
               round(mean_plan_time::numeric, 3) AS plan_ms, wal_records, round(wal_bytes / 1024.0) AS wal_kb,
               left(regexp_replace(query, '\s+', ' ', 'g'), 140) AS statement
        FROM pg_stat_statements ORDER BY total_exec_time + total_plan_time DESC LIMIT 40" >"$OUT/statements.txt" || true
    # How long notify.lag's notifications took from the rows' own times (transaction start times):
    # the save's transaction to the subscriptions worker's. The event log keeps no publication time
    # (the relay's queue, unpublished_events, forgets an event once it is sent), so the relay's and
    # the worker's shares are not told apart here.
    "$(pg_bin_dir)/psql" -h 127.0.0.1 -p "$pg_port" -U stratus -d stratus -P pager=off -c "
        WITH stages AS (
            SELECT extract(epoch FROM n.created_at - e.created_at) * 1000 AS total_ms
            FROM notifications n JOIN events e ON e.id = n.event_id
            WHERE n.subscription_id LIKE 'bench-notify-%')
        SELECT count(*) AS samples,
               round(percentile_cont(0.5) WITHIN GROUP (ORDER BY total_ms)::numeric, 1) AS total_p50,
               round(percentile_cont(0.99) WITHIN GROUP (ORDER BY total_ms)::numeric, 1) AS total_p99,
               round(max(total_ms)::numeric, 1) AS total_max
        FROM stages" >"$OUT/notify-stages.txt" || true
    log "profile: $OUT/stratus-api.perf.txt, $OUT/statements.txt and $OUT/notify-stages.txt"
fi
