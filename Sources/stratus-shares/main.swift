import StratusRuntime

StratusProcess.runTasksOnEventLoops(label: "stratus-shares", defaultEventLoops: 1)

await StratusProcess.main(label: "stratus-shares") { configuration, logger in
    try await StratusProcess.runWorker(.shares, configuration, logger: logger)
}
