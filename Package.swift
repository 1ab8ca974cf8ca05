// swift-tools-version:6.1
import PackageDescription

// librdkafka is compiled against the system headers but loaded at run time from
// `.deps/librdkafka` when present (see scripts/install-deps.sh): older distribution builds
// cannot talk to every Kafka-compatible broker. The run-time check in StratusKafka refuses
// to start with a library that is too old.
let librdkafkaRPath: [LinkerSetting] = [
    .unsafeFlags(["-Xlinker", "-rpath", "-Xlinker", Context.packageDirectory + "/.deps/librdkafka"]),
    .unsafeFlags(["-Xlinker", "-rpath", "-Xlinker", "$ORIGIN/../lib"]),
]

let package = Package(
    name: "stratus",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "stratus", targets: ["stratus"]),
        .executable(name: "stratus-api", targets: ["stratus-api"]),
        .executable(name: "stratus-indexer", targets: ["stratus-indexer"]),
        .executable(name: "stratus-subscriptions", targets: ["stratus-subscriptions"]),
        .executable(name: "stratus-gc", targets: ["stratus-gc"]),
        .executable(name: "stratus-shares", targets: ["stratus-shares"]),
        // The Swift client SDK: a typed client of every operation and a sync engine (docs/stratuskit.md).
        .library(name: "StratusKit", targets: ["StratusKit"]),
    ],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket.git", from: "2.8.1"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
        .package(url: "https://github.com/jpsim/Yams.git", from: "5.0.1"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.2.0"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
        // Distributed tracing: the API the layers open spans with, and the OTLP exporter the
        // executables bootstrap (docs/configuration.md, "Tracing"). Only the OTLP/HTTP trait of the
        // exporter: its gRPC transport would add a stack the project does not otherwise build.
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
    ],
    targets: [
        // Layer 1: the pure domain. No I/O, no async, no logger.
        .target(
            name: "StratusCore",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
            ]
        ),
        // The connection runtime: per-loop pools, connection watches, prepared statements, timers,
        // carried out over PostgresNIO; its decisions are pure state types (no I/O, no clock),
        // unit-tested without a server. The PostgreSQL adapter leases through it.
        .target(
            name: "StratusConnections",
            dependencies: [
                "StratusCore",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        // Layer 2: adapters.
        .systemLibrary(name: "CRdkafka", pkgConfig: "rdkafka", providers: [.apt(["librdkafka-dev"])]),
        .target(
            name: "StratusKafka",
            dependencies: [
                "CRdkafka",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            linkerSettings: librdkafkaRPath
        ),
        .target(
            name: "StratusPostgres",
            dependencies: [
                "StratusCore", "StratusConnections",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        // Asset bytes: a blob store on the local filesystem or on any S3-compatible object store.
        .target(
            name: "StratusBlobStore",
            dependencies: [
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "_NIOFileSystem", package: "swift-nio"),
            ]
        ),
        // Push senders: webhooks and APNs over one HTTP client each; knows nothing of storage.
        .target(
            name: "StratusPush",
            dependencies: [
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        // Issuers' key sets for ID-token sign-in, fetched over HTTP within bounds and kept.
        .target(
            name: "StratusIdentity",
            dependencies: [
                "StratusCore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        // Layer 3: application.
        .target(
            name: "StratusRelay",
            dependencies: [
                "StratusCore", "StratusConnections", "StratusPostgres", "StratusKafka",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        .target(
            name: "StratusWorkers",
            dependencies: [
                "StratusCore", "StratusPostgres", "StratusKafka", "StratusPush", "StratusBlobStore",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        .target(
            name: "StratusAPI",
            dependencies: [
                "StratusCore", "StratusPostgres", "StratusBlobStore", "StratusIdentity", "StratusPush",
                .product(name: "_NIOFileSystem", package: "swift-nio"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        // Layer 4: runtime shared by the executables.
        .target(
            name: "StratusRuntime",
            dependencies: [
                "StratusCore", "StratusPostgres", "StratusKafka", "StratusRelay", "StratusWorkers", "StratusAPI", "StratusPush",
                "StratusBlobStore", "StratusIdentity",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "OTel", package: "swift-otel"),
            ]
        ),
        // The client SDK. Depends on nothing of the server: Foundation (URLSession), and swift-crypto
        // for encrypted fields. Runs on Apple platforms and Linux alike.
        .target(
            name: "StratusKit",
            dependencies: [.product(name: "Crypto", package: "swift-crypto")]
        ),
        // The example app of Examples/Notes (its own package, for the guide's `swift run notes`),
        // built here too so the integration tests run two copies of it against the live API.
        .executableTarget(name: "notes-example", dependencies: ["StratusKit"], path: "Examples/Notes/Sources/notes"),
        // Thin executables.
        .executableTarget(name: "stratus-api", dependencies: ["StratusRuntime"]),
        .executableTarget(name: "stratus-indexer", dependencies: ["StratusRuntime"]),
        .executableTarget(name: "stratus-subscriptions", dependencies: ["StratusRuntime"]),
        .executableTarget(name: "stratus-gc", dependencies: ["StratusRuntime"]),
        .executableTarget(name: "stratus-shares", dependencies: ["StratusRuntime"]),
        .executableTarget(
            name: "stratus",
            dependencies: [
                "StratusCore",
                "StratusRuntime",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // The benchmark suite: scenarios and report (library, so tests can drive it) and its thin
        // executable (scripts/bench.sh, docs/benchmarks.md).
        .target(
            name: "StratusBench",
            dependencies: [
                "StratusCore", "StratusPostgres", "StratusWorkers", "StratusBlobStore", "StratusKit",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "stratus-bench",
            dependencies: [
                "StratusBench",
                "StratusCore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // Tests.
        .testTarget(
            name: "StratusCoreTests",
            dependencies: ["StratusCore", .product(name: "Crypto", package: "swift-crypto"), .product(name: "_CryptoExtras", package: "swift-crypto")]
        ),
        .testTarget(name: "StratusConnectionsTests", dependencies: ["StratusConnections"]),
        // StratusKit's pure parts (batching, backoff, state serialization, sealing), no server.
        .testTarget(name: "StratusKitTests", dependencies: ["StratusKit"]),
        // Real loopback servers the push tests send to: an HTTP/1.1 webhook receiver and an
        // HTTP/2-over-TLS server that checks requests as APNs would, with a certificate made at test
        // time. Test code only; knows nothing of Stratus.
        .target(
            name: "StratusPushTestSupport",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
            ],
            path: "Tests/StratusPushTestSupport"
        ),
        // The push senders against the test servers.
        .testTarget(
            name: "StratusPushTests",
            dependencies: [
                "StratusPush", "StratusPushTestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // What the integration tests share: the servers scripts/test.sh starts, a migrated database
        // per test (copied from a template migrated once per run), brokers and PostgreSQL clusters
        // of a test's own, and the executables run as child processes.
        .target(
            name: "StratusTesting",
            dependencies: [
                "StratusCore", "StratusPostgres",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            path: "Tests/StratusTesting"
        ),
        .testTarget(
            name: "StratusIntegrationTests",
            dependencies: [
                "StratusTesting", "StratusCore", "StratusConnections", "StratusPostgres", "StratusKafka", "StratusRelay", "StratusWorkers",
                "StratusAPI", "StratusRuntime", "StratusBench", "StratusPush", "StratusPushTestSupport", "StratusBlobStore", "StratusIdentity",
                "StratusKit",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Yams", package: "Yams"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            // The wire-compatibility fixtures, read from the source tree by CompatibilityTests.
            exclude: ["Compatibility"]
        ),
    ],
    swiftLanguageModes: [.v6]
)

// CI builds without indexing (`--disable-index-store`: an index is for editors, and writing it is
// about a tenth of the build's CPU), but test discovery on Linux finds the XCTest classes in the
// test targets' index. With STRATUS_TEST_INDEX_STORE set to the build's index path
// (scripts/test.sh sets it), the test targets alone are indexed there.
if let indexStore = Context.environment["STRATUS_TEST_INDEX_STORE"], !indexStore.isEmpty {
    for target in package.targets where target.type == .test {
        target.swiftSettings = (target.swiftSettings ?? []) + [.unsafeFlags(["-index-store-path", indexStore])]
    }
}
