#!/usr/bin/env bash
# Runs the whole stack locally until Ctrl-C: installs what is missing, builds, starts a private
# PostgreSQL and broker under the data folder, migrates, creates a development container once,
# then runs stratus-api and every worker. On Ctrl-C (or TERM) it stops everything it started.
# Re-running reuses the data (the broker keeps its data in memory; the relay publishes the event
# log again when it finds the broker empty).
#
# Settings (environment):
#   STRATUS_BUILD       release (default) or debug
#   STRATUS_DATA_DIR    data folder (default: .stratus/ in the repository)
#   STRATUS_PG_PORT     PostgreSQL port (default 54329)
#   STRATUS_KAFKA_PORT  broker port (default 9092)
#   STRATUS_HTTP_HOST / STRATUS_HTTP_PORT   API address (default 127.0.0.1:8080)
# Any other STRATUS_* variable (docs/configuration.md) passes through to the processes.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$STRATUS_ROOT"

# ============================================================================================
# Development authentication: how the printed example authenticates. Finalise here when the
# authentication scheme changes; nothing below depends on the details.
DEV_CONTAINER="iCloud.dev.stratus"
# The development user's record name.
DEV_USER="${STRATUS_DEV_USER:-_dev}"
# Prints a web auth token (ckWebAuthToken) for DEV_USER; prints nothing when none can be made.
dev_web_auth_token() {
    "$BIN/stratus" user token "$DEV_CONTAINER" --user "$DEV_USER" --days 30 2>>"$LOGS/stratus-cli.log" | tail -n 1 || true
}
# The authentication query items of a request: API token, then web auth token when there is one.
dev_auth_query() {
    local api_token="$1" web_token="${2:-}"
    if [[ -n "$web_token" ]]; then
        printf 'ckAPIToken=%s&ckWebAuthToken=%s' "$api_token" "$web_token"
    else
        printf 'ckAPIToken=%s' "$api_token"
    fi
}
# ============================================================================================

WORKERS=(stratus-indexer stratus-subscriptions stratus-gc stratus-shares)
BUILD="${STRATUS_BUILD:-release}"
case "$BUILD" in
    release | debug) ;;
    *) die "STRATUS_BUILD must be release or debug, not '$BUILD'" ;;
esac
DATA_DIR="${STRATUS_DATA_DIR:-$STRATUS_ROOT/.stratus}"
mkdir -p "$DATA_DIR"
DATA_DIR="$(cd "$DATA_DIR" && pwd)"
PG_DIR="$DATA_DIR/postgres"
LOGS="$DATA_DIR/logs"
RUN="$DATA_DIR/run"
PG_PORT="${STRATUS_PG_PORT:-54329}"
KAFKA_PORT="${STRATUS_KAFKA_PORT:-9092}"
HTTP_HOST="${STRATUS_HTTP_HOST:-127.0.0.1}"
HTTP_PORT="${STRATUS_HTTP_PORT:-8080}"
TOPIC="${STRATUS_TOPIC:-stratus.zone-events}"
PARTITIONS="${STRATUS_TOPIC_PARTITIONS:-8}"

"$STRATUS_ROOT/scripts/install-deps.sh"
ensure_swift_on_path || die "swift is not on PATH"

log "building ($BUILD)"
swift build -c "$BUILD"
BIN="$(swift build -c "$BUILD" --show-bin-path)"
for executable in stratus stratus-api "${WORKERS[@]}"; do
    [[ -x "$BIN/$executable" ]] || die "the build did not produce $BIN/$executable"
done

mkdir -p "$LOGS" "$RUN"
chmod 755 "$DATA_DIR"

# --- stopping ---------------------------------------------------------------------------------
PG_PID=""
TANSU_PID=""
pg_started=0
declare -A APP_PIDS=()

# Stops what a previous run left behind (e.g. after kill -9): only processes whose PID file is in
# RUN and whose command line still names the same executable.
stop_leftovers() {
    local file name pid
    for file in "$RUN"/*.pid; do
        [[ -e "$file" ]] || continue
        name="$(basename "$file" .pid)"
        pid="$(cat "$file" 2>/dev/null || true)"
        if [[ "$pid" =~ ^[0-9]+$ ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$name"; then
            log "a previous run left $name running"
            stop_pid "$pid" "$name" 15
        fi
        rm -f "$file"
    done
    if pg_running "$PG_DIR"; then
        log "a previous run left PostgreSQL running"
        pg_stop "$PG_DIR"
    fi
}

# shellcheck disable=SC2317 # invoked by the trap
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    local name
    for name in "${WORKERS[@]}" stratus-api; do
        if [[ -n "${APP_PIDS[$name]:-}" ]]; then
            stop_pid "${APP_PIDS[$name]}" "$name" 20
            rm -f "$RUN/$name.pid"
        fi
    done
    if [[ -n "$TANSU_PID" ]]; then
        tansu_stop "$TANSU_PID"
        rm -f "$RUN/tansu.pid"
    fi
    if ((pg_started)); then
        pg_stop "$PG_DIR" "$PG_PID"
    fi
    log "stopped"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

stop_leftovers

# --- PostgreSQL -------------------------------------------------------------------------------
pg_init "$PG_DIR"
if port_accepts "$PG_PORT"; then
    die "port $PG_PORT is in use: set STRATUS_PG_PORT to a free one"
fi
pg_start "$PG_DIR" "$PG_PORT" "$LOGS/postgres.log" -c max_connections=200 || die "PostgreSQL did not start"
pg_started=1
pg_create_database "$PG_PORT" stratus

# --- broker -----------------------------------------------------------------------------------
if port_accepts "$KAFKA_PORT"; then
    die "port $KAFKA_PORT is in use: set STRATUS_KAFKA_PORT to a free one"
fi
: >"$LOGS/broker.log"
tansu_start "$KAFKA_PORT" "$LOGS/broker.log" || die "the broker did not start"
printf '%s\n' "$TANSU_PID" >"$RUN/tansu.pid"
# The relay creates the topic too; creating it here lets the workers subscribe at once.
if "$(tansu_path)" topic create "$TOPIC" --partitions "$PARTITIONS" --broker "tcp://127.0.0.1:$KAFKA_PORT" \
    >>"$LOGS/broker.log" 2>&1; then
    log "topic $TOPIC created with $PARTITIONS partitions"
else
    log "topic $TOPIC not created here (the relay creates it)"
fi

# --- the token-signing key ---------------------------------------------------------------------
# Every process of this stack signs and checks tokens with one key. Unless one is configured, it is a
# development key generated once into the data folder (mode 600) and passed to every process as
# STRATUS_SECRET_KEY_FILE. Its value is never printed.
if [[ -n "${STRATUS_SECRET_KEY:-}" ]]; then
    log "token-signing key: STRATUS_SECRET_KEY"
elif [[ -n "${STRATUS_SECRET_KEY_FILE:-}" ]]; then
    log "token-signing key: STRATUS_SECRET_KEY_FILE ($STRATUS_SECRET_KEY_FILE)"
else
    STRATUS_SECRET_KEY_FILE="$DATA_DIR/dev-secret-key"
    if [[ -s "$STRATUS_SECRET_KEY_FILE" ]]; then
        log "token-signing key: the development key in $STRATUS_SECRET_KEY_FILE (this machine only)"
    else
        (
            umask 077
            od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$STRATUS_SECRET_KEY_FILE.tmp"
            printf '\n' >>"$STRATUS_SECRET_KEY_FILE.tmp"
        )
        mv -f "$STRATUS_SECRET_KEY_FILE.tmp" "$STRATUS_SECRET_KEY_FILE"
        log "token-signing key: generated a development key into $STRATUS_SECRET_KEY_FILE (this machine only)"
    fi
    export STRATUS_SECRET_KEY_FILE
fi

# --- configuration every process reads ---------------------------------------------------------
STRATUS_DATABASE_URL="postgres://stratus@127.0.0.1:$PG_PORT/stratus"
STRATUS_KAFKA_BROKERS="127.0.0.1:$KAFKA_PORT"
STRATUS_DATA_DIR="$DATA_DIR"
STRATUS_MIGRATIONS_DIR="${STRATUS_MIGRATIONS_DIR:-$STRATUS_ROOT/migrations}"
STRATUS_HTTP_HOST="$HTTP_HOST"
STRATUS_HTTP_PORT="$HTTP_PORT"
export STRATUS_DATABASE_URL STRATUS_KAFKA_BROKERS STRATUS_DATA_DIR STRATUS_MIGRATIONS_DIR STRATUS_HTTP_HOST STRATUS_HTTP_PORT

log "migrating"
"$BIN/stratus" migrate

# --- development container (once) ----------------------------------------------------------------
TOKEN_FILE="$DATA_DIR/dev-api-token"
WEB_TOKEN_FILE="$DATA_DIR/dev-web-auth-token"
read_secret() {
    [[ -f "$1" ]] || return 0
    grep -v '^#' "$1" | head -n 1 | tr -d '[:space:]'
}
write_secret() {
    local file="$1" what="$2" value="$3"
    (
        umask 077
        {
            printf '# %s: a locally generated development secret for %s (scripts/stack.sh).\n' "$what" "$DEV_CONTAINER"
            printf '# Not for production; never commit it.\n'
            printf '%s\n' "$value"
        } >"$file.tmp"
    )
    chmod 600 "$file.tmp"
    mv -f "$file.tmp" "$file"
}
token_known() {
    local token="$1"
    [[ "$token" =~ ^[0-9a-f]+$ ]] || return 1
    "$(pg_bin_dir)/psql" "$STRATUS_DATABASE_URL" -tAc \
        "SELECT 1 FROM api_tokens WHERE container = '$DEV_CONTAINER' AND token_digest = sha256(convert_to('$token', 'UTF8'))" \
        2>/dev/null | grep -q 1
}
TOKEN="$(read_secret "$TOKEN_FILE")"
if [[ -n "$TOKEN" ]] && token_known "$TOKEN"; then
    log "development container $DEV_CONTAINER: reusing the API token in $TOKEN_FILE"
else
    log "development container $DEV_CONTAINER: creating it and an API token"
    TOKEN="$("$BIN/stratus" container create "$DEV_CONTAINER" --label "local development (scripts/stack.sh)" | tail -n 1 | tr -d '[:space:]')"
    [[ -n "$TOKEN" ]] || die "stratus container create printed no token"
    write_secret "$TOKEN_FILE" "API token (ckAPIToken)" "$TOKEN"
fi
WEB_TOKEN="$(dev_web_auth_token)"
if [[ -n "$WEB_TOKEN" ]]; then
    write_secret "$WEB_TOKEN_FILE" "web auth token (ckWebAuthToken) of user $DEV_USER" "$WEB_TOKEN"
else
    rm -f "$WEB_TOKEN_FILE"
fi

# --- a development console operator (once) ---------------------------------------------------------
OPERATOR_FILE="$DATA_DIR/dev-console-password"
DEV_OPERATOR="${STRATUS_DEV_OPERATOR:-dev}"
OPERATOR_PASSWORD="$(read_secret "$OPERATOR_FILE")"
if [[ -z "$OPERATOR_PASSWORD" ]]; then
    OPERATOR_PASSWORD="$(head -c 24 /dev/urandom | base64 | tr -d '/+=')"
    if printf '%s\n' "$OPERATOR_PASSWORD" | "$BIN/stratus" operator create "$DEV_OPERATOR" >>"$LOGS/stratus-cli.log" 2>&1; then
        write_secret "$OPERATOR_FILE" "console password of operator $DEV_OPERATOR" "$OPERATOR_PASSWORD"
        log "console operator $DEV_OPERATOR created (password in $OPERATOR_FILE)"
    else
        OPERATOR_PASSWORD=""
        log "console operator $DEV_OPERATOR not created (see $LOGS/stratus-cli.log); make one with: stratus operator create LOGIN"
    fi
fi

# --- the API and the workers ----------------------------------------------------------------------
start_app() {
    local name="$1"
    printf '\n=== %s started %s ===\n' "$name" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$LOGS/$name.log"
    "$BIN/$name" </dev/null >>"$LOGS/$name.log" 2>&1 &
    APP_PIDS[$name]=$!
    printf '%s\n' "$!" >"$RUN/$name.pid"
    log "$name started (pid $!, log: $LOGS/$name.log)"
}
start_app stratus-api
for worker in "${WORKERS[@]}"; do
    start_app "$worker"
done

if ! wait_for_port "$HTTP_PORT" "${APP_PIDS[stratus-api]}" 60; then
    show_log_tail "$LOGS/stratus-api.log"
    die "stratus-api did not start listening on port $HTTP_PORT"
fi

host_for_curl="$HTTP_HOST"
if [[ "$host_for_curl" == "0.0.0.0" ]]; then
    host_for_curl=127.0.0.1
fi
base="http://$host_for_curl:$HTTP_PORT/database/1/$DEV_CONTAINER/development/private"
web_assignment=""
web_variable=""
if [[ -n "$WEB_TOKEN" ]]; then
    web_assignment="WEB=\$(grep -v '^#' '$WEB_TOKEN_FILE')"
    web_variable="\$WEB"
fi
query="$(dev_auth_query "\$TOKEN" "$web_variable")"

cat <<EOF

Stratus is running (Ctrl-C stops everything).
  API          http://$host_for_curl:$HTTP_PORT   (health: /health, readiness: /ready, metrics: /metrics)
  PostgreSQL   $STRATUS_DATABASE_URL
  broker       $STRATUS_KAFKA_BROKERS   (topic $TOPIC)
  logs         $LOGS/
  container    $DEV_CONTAINER   (API token in $TOKEN_FILE; locally generated development secret)
  console      http://$host_for_curl:$HTTP_PORT/console   (operator $DEV_OPERATOR, password in $OPERATOR_FILE)

Try it:
  TOKEN=\$(grep -v '^#' '$TOKEN_FILE')
EOF
if [[ -n "$web_assignment" ]]; then
    printf '  %s\n' "$web_assignment"
fi
cat <<EOF
  curl -s -X POST "$base/zones/modify?$query" \\
    -d '{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Notes"}}}]}'
  curl -s "$base/zones/list?$query"

EOF

# --- run until interrupted, or until a process exits --------------------------------------------
while true; do
    for name in stratus-api "${WORKERS[@]}"; do
        if ! kill -0 "${APP_PIDS[$name]}" 2>/dev/null; then
            wait "${APP_PIDS[$name]}" 2>/dev/null && code=0 || code=$?
            unset "APP_PIDS[$name]"
            rm -f "$RUN/$name.pid"
            show_log_tail "$LOGS/$name.log" 30
            die "$name exited (status $code); stopping the stack"
        fi
    done
    if [[ -n "$TANSU_PID" ]] && ! kill -0 "$TANSU_PID" 2>/dev/null; then
        TANSU_PID=""
        show_log_tail "$LOGS/broker.log" 30
        die "the broker exited; stopping the stack"
    fi
    sleep 1
done
