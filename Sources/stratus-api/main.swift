import StratusRuntime

await StratusProcess.main(label: "stratus-api") { configuration, logger in
    try await StratusProcess.runAPI(configuration, logger: logger)
}
