#!/usr/bin/env bash
# Runs the test suite: installs what is missing, starts a throwaway PostgreSQL, broker and
# S3-compatible server on free ports, builds once, and runs (docs/testing.md): the unit tests; the
# integration tests in parallel (STRATUS_TEST_WORKERS at once, default 6); meanwhile, in the
# background, the fuzz pass (scripts/fuzz.sh: schemathesis against a live stratus-api with
# docs/openapi.json) and the fault drills (scripts/drills.sh: the drills in STRATUS_TEST_DRILLS, by
# default pg-restart, pool-exhausted, api-kill, worker-kill, broker-restart and relay-takeover);
# then the classes that measure time or CPU, beside the drills that judge how much load gets
# through (pool-exhausted), with nothing else running. It always stops the servers, exits non-zero
# when any part failed, and prints each part's time. STRATUS_FUZZ=0 leaves the fuzz pass out,
# STRATUS_DRILLS=0 the drills. Arguments (e.g. --filter ZoneAPITests) go to one `swift test` as
# they are, without the fuzz pass or the drills.
#
# `scripts/test.sh --servers-only` starts the servers, prints the variables the tests read, and
# keeps the servers until Ctrl-C (for running tests from an editor). `scripts/test.sh --fuzz-only`
# runs only the fuzz pass.
#
# The tests read STRATUS_TEST_DATABASE_URL (superuser `stratus` on database `stratus`; tests create
# a database each), STRATUS_TEST_KAFKA_BROKERS, STRATUS_TANSU_BIN (the broker binary, for
# tests that run and kill a broker of their own) and STRATUS_TEST_S3_ENDPOINT (a throwaway
# S3-compatible server, moto's, for the asset tests of the S3 blob store).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$STRATUS_ROOT"
# Every line this run logs says how far into the run it came (seconds), so a slow run shows where.
log() { printf '[stratus] +%d s %s\n' "$SECONDS" "$*" >&2; }

servers_only=0
fuzz_only=0
if [[ "${1:-}" == "--servers-only" ]]; then
    servers_only=1
    shift
elif [[ "${1:-}" == "--fuzz-only" ]]; then
    fuzz_only=1
    shift
fi
run_fuzz=0
if ((fuzz_only)) || { (($# == 0)) && [[ "${STRATUS_FUZZ:-1}" != 0 ]]; }; then
    run_fuzz=1
fi
run_drills=0
if ((!fuzz_only)) && (($# == 0)) && [[ "${STRATUS_DRILLS:-1}" != 0 ]]; then
    run_drills=1
fi
# The test tiers (docs/testing.md): the targets that need no server, and the integration classes
# that measure time or CPU or load the machine, which run one at a time after the parallel tier.
unit_tests='^(StratusCoreTests|StratusConnectionsTests|StratusPushTests|StratusKitTests)\.'
# (WorkerIdleTests' PostgreSQL restart too: its ten seconds from a commit to the worker's apply, after
# the restart, took 11.4 s in a fresh-clone run where it started beside the fuzz pass and the drills.)
serial_tests='^StratusIntegrationTests\.(NonBlockingRuntimeTests|WorkerIdleTests|BenchTests/testIdleMeasurement|ContainerTenancyTests/testASuspension|ContainerDeletionTests/testADeletionIsHeard|ContainerLimitsTests/testTwoAPIProcessesHoldAContainersRate)'
# The serial tests run in two lanes, a process each, so the tail takes the longer lane instead of
# the sum: WorkerIdleTests (about 27 s, 17 of them its PostgreSQL restart, on a server of its own)
# beside the rest (15–23 s in four runs). With the drill beside them (about 25 s) they keep the cores about
# two thirds busy.
serial_lane='^StratusIntegrationTests\.WorkerIdleTests/'
# The drills CI runs: the fast subset that covers every part's recovery (docs/reliability.md).
# Those that judge how much load gets through run after the tests, beside the serial tests only; the rest in the background.
read -r -a drills <<<"${STRATUS_TEST_DRILLS:-pg-restart pool-exhausted api-kill worker-kill broker-restart relay-takeover}"
drills_alone=" pool-exhausted "
background_drills=()
alone_drills=()
for drill in "${drills[@]}"; do
    if [[ "$drills_alone" == *" $drill "* ]]; then alone_drills+=("$drill"); else background_drills+=("$drill"); fi
done
# CI (CI=true) builds without debug information and without an index: nothing attaches a debugger
# or an editor there, and on two cores the build is about a minute and a half shorter
# (docs/testing.md). Test discovery reads the test targets' index, so those alone are indexed
# (STRATUS_TEST_INDEX_STORE, Package.swift). Elsewhere the build keeps both, so a developer's own
# `swift build` after this run rebuilds nothing.
#
# CI also compiles the cryptography package's C library without the C++ interface of its headers
# (scripts/ci-cxx-prelude.h): about 60 CPU-seconds less; and the TLS package's copy of it with the
# C++ standard library's headers precompiled once (scripts/ci-cc, set as CC below): about 70 less.
# Both give the same object code (docs/testing.md).
build_flags=()
if [[ "${CI:-}" == true ]]; then
    build_flags=(-debug-info-format none --disable-index-store -Xcxx -include -Xcxx "$STRATUS_ROOT/scripts/ci-cxx-prelude.h")
fi
# The machine's busy and total CPU time so far, in clock ticks (/proc/stat), for `busy_since`.
cpu_ticks() {
    local label user nice system idle iowait rest tick
    read -r label user nice system idle iowait rest </proc/stat
    local total=$((user + nice + system + idle + iowait))
    for tick in $rest; do total=$((total + tick)); done
    echo "$((total - idle - iowait)) $total"
}
# How busy the machine's cores were since `cpu_ticks` printed $1 $2: what says whether a part
# waits (room for more at once) or computes (room only for less work).
busy_since() {
    local busy total
    read -r busy total < <(cpu_ticks)
    if ((total > $2)); then echo "cores $(((busy - $1) * 100 / (total - $2))) % busy"; else echo "cores not measured"; fi
}
# Each part's time, printed at the end.
timings=()
timed() {
    local name="$1" started=$SECONDS part_status=0 ticks
    ticks="$(cpu_ticks)"
    shift
    "$@" || part_status=$?
    # shellcheck disable=SC2086 # two numbers
    timings+=("$name: $((SECONDS - started)) s (status $part_status, $(busy_since $ticks))")
    return "$part_status"
}

"$STRATUS_ROOT/scripts/install-deps.sh"
ensure_swift_on_path || die "swift is not on PATH"
toolchain_bin="$(dirname "$(command -v swift)")"
STRATUS_CI_CLANG="$toolchain_bin/clang"
if [[ "${CI:-}" == true && -x "$STRATUS_CI_CLANG" ]]; then
    CC="$STRATUS_ROOT/scripts/ci-cc"
    STRATUS_CI_PCH_DIR="$STRATUS_ROOT/.build/ci-pch"
    export CC STRATUS_CI_CLANG STRATUS_CI_PCH_DIR
fi
# CI compiles the event loops' hot modules optimized (scripts/ci-swift-frontend, docs/testing.md).
# The driver finds the toolchain's files next to the frontend it runs (../lib), so the wrapper is
# installed as a copy in a folder of its own whose lib is the toolchain's.
STRATUS_CI_SWIFT_FRONTEND="$toolchain_bin/swift-frontend"
if [[ "${CI:-}" == true && -x "$STRATUS_CI_SWIFT_FRONTEND" ]]; then
    frontend_dir="$STRATUS_ROOT/.build/ci-frontend"
    mkdir -p "$frontend_dir/bin"
    ln -sfn "$(dirname "$toolchain_bin")/lib" "$frontend_dir/lib"
    # Copied only when changed, so a later run's build finds its compiler as it was.
    cmp -s "$STRATUS_ROOT/scripts/ci-swift-frontend" "$frontend_dir/bin/swift-frontend" ||
        cp "$STRATUS_ROOT/scripts/ci-swift-frontend" "$frontend_dir/bin/swift-frontend"
    SWIFT_DRIVER_SWIFT_FRONTEND_EXEC="$frontend_dir/bin/swift-frontend"
    export SWIFT_DRIVER_SWIFT_FRONTEND_EXEC STRATUS_CI_SWIFT_FRONTEND
fi
if [[ " ${build_flags[*]} " == *" --disable-index-store "* ]]; then
    triple="$(swiftc -print-target-info | "$(deps_python)" -c 'import json, sys; print(json.load(sys.stdin)["target"]["unversionedTriple"])')"
    export STRATUS_TEST_INDEX_STORE="$STRATUS_ROOT/.build/$triple/debug/index/store"
fi

work=""
pg_dir=""
pg_memory_dir=""
PG_PID=""
TANSU_PID=""
S3_PID=""
status=0

# Stops what the tests left running (e.g. a broker of a test that crashed): the processes that
# inherited this run's STRATUS_TEST_RUN marker.
# shellcheck disable=SC2317 # invoked by the trap
stop_test_leftovers() {
    [[ -n "${STRATUS_TEST_RUN:-}" ]] || return 0
    local entry pid environment command
    for entry in /proc/[0-9]*; do
        pid="${entry#/proc/}"
        [[ "$pid" != "$$" ]] || continue
        environment="$(tr '\0' '\n' 2>/dev/null <"$entry/environ")" || continue
        if [[ $'\n'"$environment"$'\n' == *$'\n'"STRATUS_TEST_RUN=$STRATUS_TEST_RUN"$'\n'* ]]; then
            command="$(tr '\0' ' ' 2>/dev/null <"$entry/cmdline")" || command="pid $pid"
            command="${command% }"
            stop_pid "$pid" "${command:0:80} (left by the tests)" 5
        fi
    done
}

# shellcheck disable=SC2317 # invoked by the trap
cleanup() {
    local exit_status=$?
    trap - EXIT INT TERM
    if ((status == 0)); then
        status=$exit_status
    fi
    if [[ -n "$TANSU_PID" ]]; then
        tansu_stop "$TANSU_PID"
    fi
    if [[ -n "$S3_PID" ]]; then
        s3_stop "$S3_PID"
    fi
    if [[ -n "$pg_dir" ]]; then
        pg_stop "$pg_dir" "$PG_PID"
    fi
    stop_test_leftovers
    if [[ -n "$work" && -d "$work" ]]; then
        if ((status != 0)); then
            show_log_tail "$work/postgres.log" 30
            show_log_tail "$work/broker.log" 30
            show_log_tail "$work/s3.log" 30
        fi
        rm -rf "$work"
    fi
    if [[ -n "$pg_memory_dir" && -d "$pg_memory_dir" ]]; then
        rm -rf "$pg_memory_dir"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'status=130; exit 130' INT
trap 'status=143; exit 143' TERM

work="$(mktemp -d "${TMPDIR:-/tmp}/stratus-test.XXXXXX")"
chmod 755 "$work"
give_to_pg_owner "$work"
pg_dir="$work/pg"
# The throwaway cluster lives in memory (/dev/shm) when there is room for it: every integration
# test copies the migrated template into a database of its own (about 480 a run, 10 MB each), and
# on the disk's filesystem each copy's files cost the kernel about 0.28 CPU-seconds to create
# against 0.05 in memory (docs/testing.md). STRATUS_TEST_PG_IN_MEMORY=0 keeps it on disk.
if [[ "${STRATUS_TEST_PG_IN_MEMORY:-1}" != 0 && -d /dev/shm && -w /dev/shm ]] &&
    (($(df -Pk /dev/shm | awk 'NR == 2 { print $4 }') >= 10 * 1024 * 1024)) &&
    (($(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo) >= 14 * 1024 * 1024)); then
    pg_memory_dir="$(mktemp -d /dev/shm/stratus-test-pg.XXXXXX)"
    chmod 755 "$pg_memory_dir"
    give_to_pg_owner "$pg_memory_dir"
    pg_dir="$pg_memory_dir/pg"
fi
STRATUS_TEST_RUN="$work"
export STRATUS_TEST_RUN

# The whole suite (or the fuzz pass alone) builds once, beside the servers' start: the build needs
# no server, and the servers spend their start waiting (docs/testing.md). The build inherits
# STRATUS_TEST_RUN, so a run that stops early stops it with the servers.
build_pid=""
if ((!servers_only)) && { ((fuzz_only)) || (($# == 0)); }; then
    build_command=(swift build "${build_flags[@]}")
    ((fuzz_only)) || build_command+=(--build-tests)
    log "build, beside the servers' start: ${build_command[*]}"
    build_started=$SECONDS
    build_ticks="$(cpu_ticks)"
    "${build_command[@]}" </dev/null >"$work/build.log" 2>&1 &
    build_pid=$!
fi

# PostgreSQL: throwaway, so durability is off.
pg_init "$pg_dir"
pg_port=""
for attempt in 1 2 3; do
    candidate="$(free_port)"
    if pg_start "$pg_dir" "$candidate" "$work/postgres.log" \
        -c max_connections=300 -c fsync=off -c synchronous_commit=off -c full_page_writes=off; then
        pg_port="$candidate"
        break
    fi
    log "PostgreSQL did not start on port $candidate (attempt $attempt)"
done
[[ -n "$pg_port" ]] || die "PostgreSQL did not start"
pg_create_database "$pg_port" stratus

start_on_free_port "the broker" tansu_start "$work/broker.log"
broker_port="$STARTED_PORT"
start_on_free_port "the S3-compatible server" s3_start "$work/s3.log"
s3_port="$STARTED_PORT"

STRATUS_TEST_DATABASE_URL="postgres://stratus@127.0.0.1:$pg_port/stratus"
STRATUS_TEST_KAFKA_BROKERS="127.0.0.1:$broker_port"
STRATUS_TANSU_BIN="$(tansu_path)"
STRATUS_TEST_S3_ENDPOINT="http://127.0.0.1:$s3_port"
# The Python that has selenium, for the console's browser tests.
STRATUS_TEST_PYTHON="$(deps_python)"
export STRATUS_TEST_DATABASE_URL STRATUS_TEST_KAFKA_BROKERS STRATUS_TANSU_BIN STRATUS_TEST_S3_ENDPOINT STRATUS_TEST_PYTHON

if ((servers_only)); then
    printf 'export STRATUS_TEST_DATABASE_URL=%q\n' "$STRATUS_TEST_DATABASE_URL"
    printf 'export STRATUS_TEST_KAFKA_BROKERS=%q\n' "$STRATUS_TEST_KAFKA_BROKERS"
    printf 'export STRATUS_TANSU_BIN=%q\n' "$STRATUS_TANSU_BIN"
    printf 'export STRATUS_TEST_S3_ENDPOINT=%q\n' "$STRATUS_TEST_S3_ENDPOINT"
    printf 'export STRATUS_TEST_PYTHON=%q\n' "$STRATUS_TEST_PYTHON"
    log "servers are up; Ctrl-C stops them"
    while kill -0 "$TANSU_PID" 2>/dev/null && kill -0 "$S3_PID" 2>/dev/null && pg_running "$pg_dir"; do
        sleep 1
    done
    log "a server exited"
    status=1
    exit 1
fi

# Runs one part of the run; its failure fails the run (the first failure's status is kept).
part() {
    local name="$1" part_status
    shift
    log "$name: $*"
    set +e
    timed "$name" "$@" </dev/null
    part_status=$?
    set -e
    record_status "$name" "$part_status"
}
# Records a part's exit status: a failure fails the run (the first failure's status is kept).
record_status() {
    if (($2 != 0)); then
        log "$1 failed with status $2"
        if ((status == 0)); then
            status=$2
        fi
    fi
}
# The names (Module.Class/test) of the test bundle's tests that match a tier's pattern, one a line,
# from the bundle's list (read once: listing costs the bundle about two seconds of CPU).
bundle_tests() {
    [[ -n "${bundle:-}" ]] || return 0
    if [[ ! -s "$work/tests.txt" ]]; then
        "$bundle" --list-tests 2>/dev/null >"$work/tests.txt" || return 0
    fi
    grep -E "$1" "$work/tests.txt"
}
# Waits for the build started beside the servers; prints its last lines, or its errors and end when
# it failed.
finish_build() {
    local build_status=0
    wait "$build_pid" || build_status=$?
    if ((build_status == 0)); then
        tail -n 2 "$work/build.log" >&2
    else
        grep -E "(error|fatal):" "$work/build.log" | head -n 100 >&2 || true
        show_log_tail "$work/build.log" 100
    fi
    # shellcheck disable=SC2086 # two numbers
    timings+=("build: $((SECONDS - build_started)) s (status $build_status, $(busy_since $build_ticks))")
    record_status "build" "$build_status"
}
# Runs a part in the background, its output to a log file of its own (printed when it ends).
background_names=()
background_pids=()
background_logs=()
in_background() {
    local name="$1" output="$work/${1// /-}.log"
    shift
    log "$name, in the background: $*"
    (
        started=$SECONDS
        part_status=0
        "$@" </dev/null >"$output" 2>&1 || part_status=$?
        echo "$part_status $((SECONDS - started))" >"$output.status"
    ) &
    background_pids+=("$!")
    background_names+=("$name")
    background_logs+=("$output")
}
# Waits for the background parts; prints each one's output (its end when it passed) and time.
finish_background() {
    local index name output part_status seconds
    for index in "${!background_pids[@]}"; do
        name="${background_names[$index]}"
        output="${background_logs[$index]}"
        wait "${background_pids[$index]}" || true
        read -r part_status seconds <"$output.status" || { part_status=1; seconds="?"; }
        log "---- $name: output ----"
        if ((part_status == 0)); then tail -n 25 "$output" >&2; else tail -n 400 "$output" >&2; fi
        log "---- $name: end of output ----"
        timings+=("$name: $seconds s (status $part_status)")
        record_status "$name" "$part_status"
    done
    background_names=()
    background_pids=()
    background_logs=()
}

if ((!fuzz_only)) && (($# > 0)); then
    # A developer's run: the arguments go to `swift test` as they are.
    part "swift test" swift test "${build_flags[@]}" "$@"
else
    # The whole suite (docs/testing.md). One build; then the fuzz pass and the drills run in the
    # background (each on servers and databases of its own, on the binaries just built) while the
    # tests run in tiers: the unit tests, which need no server; the integration tests in parallel,
    # one process per test, each on a database copied from a template migrated once per run; and
    # last, the classes that measure time or CPU, beside the drills that judge load only.
    finish_build
    if ((status == 0)); then
        bin="$(swift build "${build_flags[@]}" --show-bin-path)"
        if ((run_fuzz)); then
            in_background "fuzz pass" env STRATUS_BIN_DIR="$bin" "$STRATUS_ROOT/scripts/fuzz.sh"
        fi
        if ((run_drills && ${#background_drills[@]} > 0)); then
            in_background "fault drills" env STRATUS_BUILD=debug STRATUS_DRILL_BIN="$bin" "$STRATUS_ROOT/scripts/drills.sh" "${background_drills[@]}"
        fi
        if ((!fuzz_only)); then
            # The unit tests need no server and little CPU: they run beside the integration tests,
            # from the test bundle itself (`swift test` would load the package again first).
            bundle="$(find "$bin" -maxdepth 1 -name '*PackageTests.xctest' | head -n 1)"
            classes="$(bundle_tests "$unit_tests" | sed 's,/.*,,' | sort -u | paste -sd, -)" || true
            if [[ -n "$classes" ]]; then
                in_background "unit tests" "$bundle" "$classes"
            else
                record_status "unit tests (no test bundle or no unit test in it)" 1
            fi
            # One process a test, STRATUS_TEST_WORKERS at once, the known slowest first
            # (scripts/parallel-tests.py); the run's own durations go to .build for the next.
            part "integration tests" "$(deps_python)" "$STRATUS_ROOT/scripts/parallel-tests.py" "$bundle" --tests "$work/tests.txt" \
                --workers "${STRATUS_TEST_WORKERS:-6}" --skip "$unit_tests" --skip "$serial_tests" \
                --durations "$STRATUS_ROOT/scripts/test-durations.txt" --record "$STRATUS_ROOT/.build/test-durations.txt"
        fi
        finish_background
        # Last, the serial tests (in their two lanes) and the drills that judge how much load gets
        # through, beside each other: none loads the cores much (together about two thirds of
        # them), so each still runs as good as alone, and the tail takes the longest instead of
        # their sum.
        if ((run_drills && ${#alone_drills[@]} > 0)); then
            in_background "fault drills, beside the serial tests" env STRATUS_BUILD=debug STRATUS_DRILL_BIN="$bin" "$STRATUS_ROOT/scripts/drills.sh" "${alone_drills[@]}"
        fi
        if ((!fuzz_only)); then
            # From the test bundle too: `swift test` spends about 10 s of CPU before its first test.
            serial="$(bundle_tests "$serial_tests" | grep -Ev "$serial_lane" | paste -sd, -)" || true
            lane="$(bundle_tests "$serial_tests" | grep -E "$serial_lane" | paste -sd, -)" || true
            if [[ -n "$serial" && -n "$lane" ]]; then
                in_background "serial tests, second lane" "$bundle" "$lane"
                part "serial tests" "$bundle" "$serial"
            else
                record_status "serial tests (no test bundle, or a lane without tests)" 1
            fi
        fi
        finish_background
    fi
fi
for timing in "${timings[@]}"; do
    log "time: $timing"
done
exit "$status"
