#!/usr/bin/env bash
# Fault drills: starts a throwaway stack (PostgreSQL, the broker, stratus-api, the workers) on free
# ports, runs load against it while killing and restarting its parts, and checks that nothing
# acknowledged is lost and no effect is applied twice. Prints each drill's figures; exits non-zero
# when a drill fails. Results are recorded in docs/reliability.md.
#
#   scripts/drills.sh                 every drill
#   scripts/drills.sh api-kill pg-restart   some of them (names: see scripts/drills.py --list)
#
# Settings: STRATUS_BUILD (debug, the default, or release); STRATUS_DRILL_BIN, a folder of binaries
# to drill instead of building (e.g. an earlier commit's); STRATUS_DRILL_LOG_LEVEL, the log level of
# every process (default warning). A failed run keeps the processes' logs and says where.
#
# The cluster archives its WAL (archive_mode on, into the run's wal-archive folder), as a deployment
# that can be restored to a point in time does: the backup-restore drill takes a base backup of it and
# restores it, with that archive, into a second cluster.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$STRATUS_ROOT"

"$STRATUS_ROOT/scripts/install-deps.sh"
ensure_swift_on_path || die "swift is not on PATH"
BUILD="${STRATUS_BUILD:-debug}"
case "$BUILD" in
    release | debug) ;;
    *) die "STRATUS_BUILD must be release or debug, not '$BUILD'" ;;
esac
if [[ -n "${STRATUS_DRILL_BIN:-}" ]]; then
    # Binaries built elsewhere (e.g. an earlier commit's, for an A/B): no build.
    BIN="$STRATUS_DRILL_BIN"
    [[ -x "$BIN/stratus-api" ]] || die "STRATUS_DRILL_BIN=$BIN has no stratus-api"
else
    log "building ($BUILD)"
    swift build -c "$BUILD" >/dev/null
    BIN="$(swift build -c "$BUILD" --show-bin-path)"
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/stratus-drills.XXXXXX")"
chmod 755 "$work"
give_to_pg_owner "$work"
PG_PID=""
cleanup() {
    local status=$?
    pg_stop "$work/pg"
    # backup-restore's cluster, when it ran.
    pg_stop "$work/pg-restored"
    if ((status != 0)); then
        # The processes' logs outlive a failed run, for finding out why.
        local kept
        kept="$(mktemp -d "${TMPDIR:-/tmp}/stratus-drills-logs.XXXXXX")"
        cp "$work"/*.log "$kept"/ 2>/dev/null || true
        log "drill logs kept in $kept"
    fi
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT INT TERM

pg_init "$work/pg"
mkdir -p "$work/wal-archive"
give_to_pg_owner "$work/wal-archive"
cat >>"$work/pg/postgresql.conf" <<EOF
archive_mode = on
archive_command = 'test ! -f $work/wal-archive/%f && cp %p $work/wal-archive/%f'
EOF
pg_port="$(free_port)"
pg_start "$work/pg" "$pg_port" "$work/postgres.log" -c max_connections=200 || die "PostgreSQL did not start"
pg_create_database "$pg_port" stratus

export STRATUS_DRILL_BIN="$BIN"
export STRATUS_DRILL_WORK="$work"
export STRATUS_DRILL_PG_PORT="$pg_port"
export STRATUS_DRILL_TANSU="$(tansu_path)"
export STRATUS_DRILL_WAL_ARCHIVE="$work/wal-archive"
export STRATUS_DATABASE_URL="postgres://stratus@127.0.0.1:$pg_port/stratus"
export STRATUS_MIGRATIONS_DIR="$STRATUS_ROOT/migrations"
export STRATUS_DATA_DIR="$work/data"
mkdir -p "$STRATUS_DATA_DIR"
# The Python that has the broker's client (backup-restore reads the rebuilt topic with it).
"$(deps_python)" "$STRATUS_ROOT/scripts/drills.py" "$@"
