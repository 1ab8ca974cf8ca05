import StratusRuntime

await StratusProcess.main(label: "stratus-gc") { configuration, logger in
    try await StratusProcess.runWorker(.gc, configuration, logger: logger)
}
