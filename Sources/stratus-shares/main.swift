import StratusRuntime

await StratusProcess.main(label: "stratus-shares") { configuration, logger in
    try await StratusProcess.runWorker(.shares, configuration, logger: logger)
}
