/// A container an operator suspended (`stratus container suspend`, the console): every request for
/// it is refused, whichever credential it carries, until the container is resumed. Its data stays.
public enum ContainerSuspension {
    /// Refuses a request for `container` while it is suspended, or being deleted (`ContainerDeletion`).
    public static func check(_ suspended: Bool, deleting: Bool = false, container: String) throws(StratusError) {
        if deleting { throw ContainerDeletion.refusal(container: container) }
        guard suspended else { return }
        throw StratusError(
            .accessDenied, "Container '\(ClientText.excerpt(container))' is suspended by its operator; its requests are refused until it is resumed")
    }
}
