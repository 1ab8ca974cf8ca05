import StratusRuntime

StratusProcess.runTasksOnEventLoops(label: "stratus-indexer", defaultEventLoops: 1)

await StratusProcess.main(label: "stratus-indexer") { configuration, logger in
    try await StratusProcess.runWorker(.indexer, configuration, logger: logger)
}
