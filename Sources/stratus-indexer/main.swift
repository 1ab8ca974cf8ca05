import StratusRuntime

await StratusProcess.main(label: "stratus-indexer") { configuration, logger in
    try await StratusProcess.runWorker(.indexer, configuration, logger: logger)
}
