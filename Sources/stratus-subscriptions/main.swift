import StratusRuntime

await StratusProcess.main(label: "stratus-subscriptions") { configuration, logger in
    try await StratusProcess.runWorker(.subscriptions, configuration, logger: logger)
}
