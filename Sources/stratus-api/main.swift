import StratusRuntime

StratusProcess.runTasksOnEventLoops(label: "stratus-api")
await StratusProcess.main(label: "stratus-api") { configuration, logger in
    try await StratusProcess.runAPI(configuration, logger: logger)
}
