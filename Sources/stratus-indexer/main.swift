import StratusRuntime

await StratusProcess.main(label: "stratus-indexer") { configuration, logger in
    try await StratusProcess.runWorker(named: "stratus-indexer", configuration, logger: logger)
}
