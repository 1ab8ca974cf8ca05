import StratusRuntime

StratusProcess.runTasksOnEventLoops(label: "stratus-subscriptions", defaultEventLoops: 1)

await StratusProcess.main(label: "stratus-subscriptions") { configuration, logger in
    try await StratusProcess.runWorker(.subscriptions, configuration, logger: logger)
}
