/// A container an operator suspended (`stratus container suspend`, the console): every request for
/// it is refused, whichever credential it carries, until the container is resumed. Its data stays.
public enum ContainerSuspension {
    /// Refuses a request for `container` while it is suspended.
    public static func check(_ suspended: Bool, container: String) throws(StratusError) {
        guard suspended else { return }
        throw StratusError(
            .accessDenied, "Container '\(ClientText.excerpt(container))' is suspended by its operator; its requests are refused until it is resumed")
    }
}
