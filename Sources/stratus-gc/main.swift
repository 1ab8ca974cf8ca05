import StratusRuntime

StratusProcess.runTasksOnEventLoops(label: "stratus-gc", defaultEventLoops: 1)

await StratusProcess.main(label: "stratus-gc") { configuration, logger in
    try await StratusProcess.runWorker(.gc, configuration, logger: logger)
}
