// swift-tools-version:6.1
import PackageDescription

// A small command-line notes app over StratusKit: two copies (two state folders) sync through a
// local stack (`scripts/stack.sh`). See README.md.
let package = Package(
    name: "notes",
    platforms: [.macOS(.v14)],
    dependencies: [.package(name: "stratus", path: "../..")],
    targets: [
        .executableTarget(name: "notes", dependencies: [.product(name: "StratusKit", package: "stratus")]),
    ],
    swiftLanguageModes: [.v6]
)
