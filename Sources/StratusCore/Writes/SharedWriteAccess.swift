/// What a user reaches of an owner's zone through the shared database: the shares they accepted
/// there, and the permission each gives.
public struct SharedZoneAccess: Sendable, Hashable {
    /// The permission of a zone-wide share the user accepted; nil when only records are shared.
    public var zoneWide: SharePermission?
    /// The roots of the record shares the user accepted in the zone, with the permission each gives.
    public var roots: [String: SharePermission]
    /// The share records the user reaches (each visible with its hierarchy).
    public var shares: [String]

    /// Creates an access.
    public init(zoneWide: SharePermission? = nil, roots: [String: SharePermission] = [:], shares: [String] = []) {
        self.zoneWide = zoneWide
        self.roots = roots
        self.shares = shares
    }
}

/// A participant's write through the shared database, decided in two steps: `check` decides what
/// the operation alone decides, and names the records (anchors) whose hierarchies decide the rest;
/// `checkAnchors` decides that from the roots each anchor's `parent` chain reaches, as the caller
/// read them from the owner's zone. A record the participant does not reach is NOT_FOUND, as if it
/// did not exist.
extension SharedZoneAccess {
    /// What is left to check of a write once `check` allowed it.
    public enum WriteCheck: Sendable, Hashable {
        /// Nothing: the write is allowed.
        case allowed
        /// These records (the record itself if it exists, and the parent it is given) must each
        /// reach a root shared READ_WRITE.
        case anchors([String])
    }

    /// Checks one operation on `recordName` (its type as sent, its `parent` as sent: nil when not
    /// sent, `.some(nil)` when removed; `current`, the record as stored). A share record may only be
    /// saved or deleted to leave it (which `ShareRules` decides), and only one the participant
    /// reaches; any other record needs a zone-wide share READ_WRITE or, for record shares, anchors
    /// in a hierarchy shared READ_WRITE: a new record needs a parent inside one, and only a root may
    /// lose its parent.
    public func check(recordName: String, recordType: String?, parent: String??, current: Record?) throws(StratusError) -> WriteCheck {
        if ShareRecord.isShare(current?.recordType ?? recordType ?? "") {
            guard current != nil, shares.contains(where: { ExactName($0) == ExactName(recordName) }) else { throw Self.notFound(recordName) }
            return .allowed
        }
        if let zoneWide {
            guard zoneWide == .readWrite else { throw Self.readOnly(recordName) }
            return .allowed
        }
        var anchors: [String] = []
        if current != nil { anchors.append(recordName) }
        switch parent {
        case .some(.some(let parent)):
            anchors.append(parent)
        case .some(.none):
            // Losing its parent takes a record out of the hierarchy, unless it is a root.
            if !roots.keys.contains(where: { ExactName($0) == ExactName(recordName) }) {
                throw StratusError(.accessDenied, "Record '\(ClientText.excerpt(recordName))' cannot leave the shared hierarchy")
            }
        case .none:
            if current == nil {
                throw StratusError(.accessDenied, "Record '\(ClientText.excerpt(recordName))': a record created in a shared hierarchy needs a parent inside it")
            }
        }
        return anchors.isEmpty ? .allowed : .anchors(anchors)
    }

    /// Checks the anchors `check` named for a write of `recordName`, given the roots of the user's
    /// record shares each anchor reaches (`reached`; an anchor that reaches none is absent).
    public func checkAnchors(_ anchors: [String], recordName: String, reached: [ExactName: [String]]) throws(StratusError) {
        for anchor in anchors {
            guard let reachedRoots = reached[ExactName(anchor)] else {
                throw anchor == recordName ? Self.notFound(recordName) : StratusError(.accessDenied,
                    "Record '\(ClientText.excerpt(recordName))': its parent '\(ClientText.excerpt(anchor))' is not in a hierarchy shared with the caller")
            }
            guard reachedRoots.contains(where: { roots[$0] == .readWrite }) else { throw Self.readOnly(recordName) }
        }
    }

    private static func notFound(_ recordName: String) -> StratusError {
        StratusError(.notFound, "Record '\(ClientText.excerpt(recordName))' does not exist")
    }

    private static func readOnly(_ recordName: String) -> StratusError {
        StratusError(.accessDenied, "Record '\(ClientText.excerpt(recordName))': the share gives the caller READ_ONLY permission")
    }
}
