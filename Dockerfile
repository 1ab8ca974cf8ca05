# syntax=docker/dockerfile:1
# One image with every Stratus executable: stratus (admin CLI), stratus-api and the workers
# stratus-indexer, stratus-subscriptions, stratus-gc, stratus-shares. docker-compose.yml picks the
# executable per service. Ubuntu 24.04's librdkafka (2.3) is new enough for Apache Kafka.

# ---- build ------------------------------------------------------------------------------------
FROM swift:6.1-noble AS builder

RUN export DEBIAN_FRONTEND=noninteractive \
    && apt-get -q update \
    && apt-get -q install -y --no-install-recommends librdkafka-dev libpq-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /build

# Resolve dependencies first so they are cached while only sources change.
COPY Package.* ./
RUN swift package resolve

COPY Sources ./Sources
# Package.swift declares the test targets too; their folders must exist for it to load.
COPY Tests ./Tests
COPY migrations ./migrations

RUN swift build -c release --product stratus \
    && swift build -c release --product stratus-api \
    && swift build -c release --product stratus-indexer \
    && swift build -c release --product stratus-subscriptions \
    && swift build -c release --product stratus-gc \
    && swift build -c release --product stratus-shares

RUN mkdir -p /staging/bin /staging/swift \
    && bin="$(swift build -c release --show-bin-path)" \
    && for executable in stratus stratus-api stratus-indexer stratus-subscriptions stratus-gc stratus-shares; do \
           install -m 0755 "$bin/$executable" /staging/bin/; \
       done \
    && cp -a /usr/lib/swift/linux/*.so* /staging/swift/

# ---- run --------------------------------------------------------------------------------------
FROM ubuntu:24.04

RUN export DEBIAN_FRONTEND=noninteractive \
    && apt-get -q update \
    && apt-get -q install -y --no-install-recommends librdkafka1 libpq5 ca-certificates tzdata libcurl4 libxml2 \
    && rm -rf /var/lib/apt/lists/*

# The Swift runtime libraries, where the binaries look for them.
COPY --from=builder /staging/swift/ /usr/lib/swift/linux/
COPY --from=builder /staging/bin/ /usr/local/bin/
COPY migrations /usr/share/stratus/migrations

RUN useradd --system --user-group --home-dir /var/lib/stratus --create-home --shell /usr/sbin/nologin stratus \
    && install -d -o stratus -g stratus /var/lib/stratus/assets

# A production image: its processes refuse to start without STRATUS_SECRET_KEY (or
# STRATUS_SECRET_KEY_FILE) rather than each generating a key of its own.
ENV STRATUS_DEPLOYMENT=production \
    STRATUS_MIGRATIONS_DIR=/usr/share/stratus/migrations \
    STRATUS_DATA_DIR=/var/lib/stratus \
    STRATUS_HTTP_HOST=0.0.0.0 \
    STRATUS_HTTP_PORT=8080

USER stratus
WORKDIR /var/lib/stratus
EXPOSE 8080
CMD ["stratus-api"]
