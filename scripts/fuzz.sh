#!/usr/bin/env bash
# The fuzz pass: checks docs/openapi.json (valid OpenAPI 3.1, written by scripts/openapi.py), starts
# stratus-api on a free port over a fresh database of the test PostgreSQL and the test broker, makes
# a container, its API token and a user's web auth token with the `stratus` CLI, and runs
# schemathesis against it with the document for a bounded time. Fails on any 5xx, any answer the
# document does not allow (status, content type, headers, body), a request that gets no answer in
# time, or stratus-api exiting. Always stops the stratus-api it started.
#
# scripts/test.sh runs it after `swift test`; `scripts/test.sh --fuzz-only` runs it alone (starting
# and stopping the test servers). Run directly, it needs STRATUS_TEST_DATABASE_URL and
# STRATUS_TEST_KAFKA_BROKERS (as `scripts/test.sh --servers-only` prints them).
#
#   STRATUS_FUZZ_SECONDS   time budget of schemathesis (default 120)
#   STRATUS_BIN_DIR        a folder with stratus and stratus-api built already (else they are built)
#   STRATUS_FUZZ_SEED      a seed, to repeat a run (schemathesis prints the seed it used)
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$STRATUS_ROOT"

: "${STRATUS_TEST_DATABASE_URL:?run scripts/test.sh --fuzz-only, or set the variables scripts/test.sh --servers-only prints}"
: "${STRATUS_TEST_KAFKA_BROKERS:?run scripts/test.sh --fuzz-only, or set the variables scripts/test.sh --servers-only prints}"
seconds="${STRATUS_FUZZ_SECONDS:-120}"
[[ "$seconds" =~ ^[0-9]+$ && "$seconds" -ge 1 ]] || die "STRATUS_FUZZ_SECONDS must be a whole number of seconds"
ensure_swift_on_path || die "swift is not on PATH"
python="$(deps_python)"
"$python" -m schemathesis.cli --version >/dev/null 2>&1 || die "schemathesis is not installed (run scripts/install-deps.sh)"

log "fuzz: checking docs/openapi.json"
"$python" scripts/openapi.py --check

work=""
API_PID=""
# shellcheck disable=SC2317 # invoked by the trap
cleanup() {
    local status=$?
    trap - EXIT INT TERM
    stop_pid "$API_PID" "stratus-api (fuzz)" 15
    if [[ -n "$work" && -d "$work" ]]; then
        if ((status != 0)); then
            show_log_tail "$work/stratus-api.log" 40
            # What the server logged as its own faults (a 5xx's cause), if anything.
            grep -E ' (error|critical) ' "$work/stratus-api.log" | tail -n 20 >&2 || true
        fi
        rm -rf "$work"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
work="$(mktemp -d "${TMPDIR:-/tmp}/stratus-fuzz.XXXXXX")"

if [[ -n "${STRATUS_BIN_DIR:-}" ]]; then
    # Binaries built already (scripts/test.sh builds once for every part).
    bin="$STRATUS_BIN_DIR"
    [[ -x "$bin/stratus-api" && -x "$bin/stratus" ]] || die "STRATUS_BIN_DIR=$bin has no stratus and stratus-api"
else
    log "fuzz: building stratus and stratus-api"
    swift build --product stratus >/dev/null
    swift build --product stratus-api >/dev/null
    bin="$(swift build --show-bin-path)"
fi

# A database of its own on the test server, and a process environment of its own.
name="stratus_fuzz_$(od -An -tx1 -N4 /dev/urandom | tr -d ' \n')"
"$(pg_bin_dir)/psql" "$STRATUS_TEST_DATABASE_URL" -qAtc "CREATE DATABASE $name" >/dev/null
port="$(free_port)"
STRATUS_DATABASE_URL="${STRATUS_TEST_DATABASE_URL%/*}/$name"
STRATUS_KAFKA_BROKERS="$STRATUS_TEST_KAFKA_BROKERS"
STRATUS_TOPIC="$name"
STRATUS_SECRET_KEY="$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
STRATUS_DATA_DIR="$work"
STRATUS_MIGRATIONS_DIR="$STRATUS_ROOT/migrations"
STRATUS_HTTP_HOST=127.0.0.1
STRATUS_HTTP_PORT="$port"
export STRATUS_DATABASE_URL STRATUS_KAFKA_BROKERS STRATUS_TOPIC STRATUS_SECRET_KEY STRATUS_DATA_DIR STRATUS_MIGRATIONS_DIR \
    STRATUS_HTTP_HOST STRATUS_HTTP_PORT

"$bin/stratus" migrate >"$work/cli.log" 2>&1 || { show_log_tail "$work/cli.log"; die "fuzz: stratus migrate failed"; }
STRATUS_FUZZ_CONTAINER="iCloud.fuzz.stratus"
STRATUS_FUZZ_API_TOKEN="$("$bin/stratus" container create "$STRATUS_FUZZ_CONTAINER" --label fuzz 2>>"$work/cli.log" | tail -n 1 | tr -d '[:space:]')"
STRATUS_FUZZ_WEB_AUTH_TOKEN="$("$bin/stratus" user token "$STRATUS_FUZZ_CONTAINER" --user _fuzz --days 1 2>>"$work/cli.log" | tail -n 1 | tr -d '[:space:]')"
[[ -n "$STRATUS_FUZZ_API_TOKEN" && -n "$STRATUS_FUZZ_WEB_AUTH_TOKEN" ]] || { show_log_tail "$work/cli.log"; die "fuzz: the CLI made no tokens"; }
export STRATUS_FUZZ_CONTAINER STRATUS_FUZZ_API_TOKEN STRATUS_FUZZ_WEB_AUTH_TOKEN
# The sign-in example of docs/openapi.json signs this user in.
printf '%s\n' "a long fuzz password" | "$bin/stratus" user create "$STRATUS_FUZZ_CONTAINER" --login fuzz@example.com \
    >>"$work/cli.log" 2>&1 || { show_log_tail "$work/cli.log"; die "fuzz: stratus user create failed"; }

"$bin/stratus-api" </dev/null >"$work/stratus-api.log" 2>&1 &
API_PID=$!
base="http://127.0.0.1:$port"
waited=0
until curl -fsS -o /dev/null "$base/health" 2>/dev/null; do
    kill -0 "$API_PID" 2>/dev/null || die "fuzz: stratus-api exited before it served /health"
    ((waited < 600)) || die "fuzz: stratus-api did not serve /health within 60 s"
    sleep 0.1
    waited=$((waited + 1))
done
# The zone the examples of docs/openapi.json write to and read from.
curl -fsS -o /dev/null -X POST -d '{"operations":[{"operationType":"create","zone":{"zoneID":{"zoneName":"Notes"}}}]}' \
    "$base/database/1/$STRATUS_FUZZ_CONTAINER/development/private/zones/modify?ckAPIToken=$STRATUS_FUZZ_API_TOKEN&ckWebAuthToken=$STRATUS_FUZZ_WEB_AUTH_TOKEN" ||
    die "fuzz: could not create the zone Notes"
log "fuzz: stratus-api (pid $API_PID) serves $base; schemathesis for at most ${seconds}s"

seed=()
if [[ -n "${STRATUS_FUZZ_SEED:-}" ]]; then
    seed=(--seed "$STRATUS_FUZZ_SEED")
fi
set +e
# The outer timeout only guards against a run that ignores its own budget.
# The web courier's long poll is left out: it waits up to 30 s by design, past the request timeout
# (SubscriptionTests drives it, unknown tokens and bad timeouts included).
timeout --kill-after=10 "$((seconds + 120))" "$python" -m schemathesis.cli --config-file scripts/fuzz.toml --no-color run docs/openapi.json \
    --url "$base" \
    --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
    --max-time "$seconds" --request-timeout 15 --workers 1 --generation-database none "${seed[@]}" \
    --exclude-operation-id webCourier </dev/null
status=$?
set -e
if ! kill -0 "$API_PID" 2>/dev/null; then
    log "fuzz: stratus-api exited during the run"
    status=1
fi
if ((status != 0)); then
    log "fuzz: failed (schemathesis status $status)"
    exit "$status"
fi
log "fuzz: passed"
