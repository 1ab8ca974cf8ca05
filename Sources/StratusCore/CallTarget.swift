/// Where a database call lands: the database a caller addresses (the path's scope, owned by the
/// caller in the private and shared databases), made once per request, and what that scope means
/// for the call. The rules that turn a zone the client names into the database, zone and
/// participant a store works on (`zone(named:owner:rules:)`) live here and nowhere else: the
/// shared database is other users' zones, each read and written in its owner's private database
/// for the participant, whose access the store checks in the same transaction or snapshot.
public struct CallTarget: Sendable, Hashable {
    /// The database as the caller addresses it.
    public let addressed: DatabaseID

    public init(addressed: DatabaseID) {
        self.addressed = addressed
    }

    /// The user whose database it is: the owner of a private database, the participant of a
    /// shared one; nil for the public database.
    public var user: String? {
        addressed.scope == .public ? nil : addressed.owner
    }

    /// In the shared database, the caller it is shared with: the zones and records it reaches are
    /// those other users shared with this participant. Nil elsewhere.
    public var participant: String? {
        addressed.scope == .shared ? addressed.owner : nil
    }

    /// Whether the database belongs to its user (the private database): the user owns its custom
    /// zones, which are created and deleted only here, and every record in it, so its records are
    /// read with no per-record access check and written as the user.
    public var belongsToUser: Bool {
        addressed.scope == .private
    }

    /// Whether the database has a default zone: every database but the shared one, which holds
    /// only other users' custom zones.
    public var hasDefaultZone: Bool {
        participant == nil
    }

    /// The database that holds the zone of `owner` in this database: in the shared database that
    /// owner's private database; elsewhere (or with no owner) the addressed database.
    public func database(ofZoneOwner owner: String?) -> DatabaseID {
        guard participant != nil, let owner else { return addressed }
        return DatabaseID(container: addressed.container, environment: addressed.environment, scope: .private, owner: owner)
    }

    /// Whether a client naming a zone's owner names this database's owner: the owner itself, or
    /// `__defaultOwner__`, which stands for it.
    public func isOwner(_ named: String) -> Bool {
        named == addressed.owner || named == ZoneID.defaultOwnerName
    }

    /// The owner an answer about a zone the client named reports (an error entry's zoneID): the
    /// named owner in the shared database (empty when none was named), the database's elsewhere.
    public func reportedOwner(named owner: String?) -> String {
        participant == nil ? addressed.owner : owner ?? ""
    }

    /// Which zones a call may name, beyond the rules every call keeps.
    public struct ZoneRules: Sendable, Hashable {
        /// Refuse here a custom zone of the public database, which has only `_defaultZone` (else
        /// the store finds no such zone).
        public var publicDefaultZoneOnly: Bool
        /// Whether the call serves the shared database at all.
        public var servesShared: Bool

        /// `records/modify` and `records/lookup`.
        public static let records = ZoneRules(publicDefaultZoneOnly: true, servesShared: true)
        /// `records/query` and the changes of a zone: the store answers a public custom zone.
        public static let reads = ZoneRules(publicDefaultZoneOnly: false, servesShared: true)
        /// `assets/upload` and `assets/rereference`: the caller's own or the public database.
        public static let assets = ZoneRules(publicDefaultZoneOnly: true, servesShared: false)
    }

    /// The zone a call names (`zoneName` nil: the default zone), resolved: in the shared database a
    /// zone named with its owner, in the owner's private database, for the participant; elsewhere
    /// a zone of the addressed database named with no owner or with its own.
    public func zone(named zoneName: String?, owner: String?, rules: ZoneRules) throws(StratusError) -> ZoneTarget {
        if let participant, rules.servesShared {
            guard let zoneName, zoneName != ZoneID.defaultZoneName, let owner, !owner.isEmpty else {
                throw StratusError(.zoneNotFound, "The shared database holds other users' zones: name one with zoneID {zoneName, ownerRecordName}")
            }
            try ZoneID.validate(zoneName: zoneName)
            try Record.validate(recordName: owner, "zoneID.ownerRecordName")
            return ZoneTarget(
                database: database(ofZoneOwner: owner), zone: ZoneID(zoneName: zoneName, ownerRecordName: owner), participant: participant)
        }
        let name = zoneName ?? ZoneID.defaultZoneName
        if name != ZoneID.defaultZoneName { try ZoneID.validate(zoneName: name) }
        if let owner, !isOwner(owner) {
            throw StratusError(.zoneNotFound, "Zone '\(ClientText.excerpt(name))' does not exist in this database")
        }
        if participant != nil {
            throw StratusError(.zoneNotFound, "No zone '\(ClientText.excerpt(name))' is shared with the caller")
        }
        if rules.publicDefaultZoneOnly, user == nil, name != ZoneID.defaultZoneName {
            throw StratusError(.zoneNotFound, "The public database has only _defaultZone")
        }
        return ZoneTarget(database: addressed, zone: ZoneID(zoneName: name, ownerRecordName: addressed.owner), participant: nil)
    }
}

/// A zone a call works on, resolved from its `CallTarget`.
public struct ZoneTarget: Sendable, Hashable {
    /// The database that holds the zone (in the shared database, the zone owner's private database).
    public let database: DatabaseID
    /// The zone, named with its owner.
    public let zone: ZoneID
    /// In the shared database, the participant whose access the store checks; nil elsewhere.
    public let participant: String?
}
