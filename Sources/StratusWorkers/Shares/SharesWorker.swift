extension WorkerDefinition {
    /// `stratus-shares`: the share fan-out, each participant's shared-database tracking.
    public static let shares = WorkerDefinition(name: "stratus-shares", projection: SharesProjection())
}
