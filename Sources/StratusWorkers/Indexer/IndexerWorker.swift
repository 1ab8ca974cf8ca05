extension WorkerDefinition {
    /// `stratus-indexer`: the query index and its zone directory. Its replay builds a new index
    /// generation beside the live one (`IndexerReplay`), so queries keep being answered meanwhile.
    public static let indexer = WorkerDefinition(
        name: "stratus-indexer", projection: IndexerProjection(),
        replay: { source, logger, progress in
            try await IndexerReplay(store: source.store, kafka: source.kafka, topic: source.topic).run(logger: logger, progress: progress)
        })
}
