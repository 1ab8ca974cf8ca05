import Foundation

/// What a share participant may do with the shared records, in CloudKit's words.
public enum SharePermission: String, Sendable, Hashable, Codable, CaseIterable {
    /// No access (the only value a share's `publicPermission` may have besides the two below).
    case none = "NONE"
    /// Read the shared records.
    case readOnly = "READ_ONLY"
    /// Read and write them.
    case readWrite = "READ_WRITE"
}

/// Where a participant stands with a share.
public enum ShareAcceptanceStatus: String, Sendable, Hashable, Codable, CaseIterable {
    /// Invited; has not accepted yet.
    case pending = "PENDING"
    /// Accepted: the shared zone is in the participant's shared database.
    case accepted = "ACCEPTED"
    /// Removed by the owner, or left.
    case removed = "REMOVED"
}

/// A participant's role in a share.
public enum ShareParticipantType: String, Sendable, Hashable, Codable, CaseIterable {
    /// The share's owner: always a participant, with READ_WRITE.
    case owner = "OWNER"
    /// A user the owner invited.
    case user = "USER"
    /// Anyone signed in who accepted through the share's URL (a public share).
    case publicUser = "PUBLIC_USER"
}

/// How a participant is named: by user record name or by email address (a lookup info).
public enum ParticipantLookup: Sendable, Hashable, Codable {
    case userRecordName(String)
    case emailAddress(String)

    /// How two lookups are the same participant: email addresses regardless of capitals.
    public var key: String {
        switch self {
        case .userRecordName(let name): "u:" + name
        case .emailAddress(let email): "e:" + email.lowercased()
        }
    }
}

/// One participant of a share.
public struct ShareParticipant: Sendable, Hashable, Codable {
    /// Who.
    public var lookup: ParticipantLookup
    /// What they may do.
    public var permission: SharePermission
    /// Where they stand.
    public var acceptanceStatus: ShareAcceptanceStatus
    /// Their role.
    public var type: ShareParticipantType
    /// The user who took this place: known once someone accepted it (a participant invited by
    /// email address is a user record name only from then on).
    public var userRecordName: String?

    /// Creates a participant.
    public init(
        lookup: ParticipantLookup, permission: SharePermission, acceptanceStatus: ShareAcceptanceStatus = .pending, type: ShareParticipantType = .user,
        userRecordName: String? = nil
    ) {
        self.lookup = lookup
        self.permission = permission
        self.acceptanceStatus = acceptanceStatus
        self.type = type
        self.userRecordName = userRecordName ?? { if case .userRecordName(let name) = lookup { name } else { nil } }()
    }

    /// Whether this participant is `user`.
    public func isUser(_ user: String) -> Bool { userRecordName == user || lookup == .userRecordName(user) }
}

/// The sharing state of a `cloudkit.share` record: its owner, who else takes part, and what anyone
/// with the URL may do.
public struct ShareState: Sendable, Hashable, Codable {
    /// The owner's user record name (the owner of the zone the share lives in).
    public var owner: String
    /// What anyone signed in with the share's URL may do: NONE (a private share), READ_ONLY or READ_WRITE.
    public var publicPermission: SharePermission
    /// The participants, the owner first.
    public var participants: [ShareParticipant]

    /// Creates a state.
    public init(owner: String, publicPermission: SharePermission = .none, participants: [ShareParticipant] = []) {
        self.owner = owner
        self.publicPermission = publicPermission
        self.participants = participants
    }

    /// The users who hold the share's zone in their shared database: every participant who
    /// accepted, the owner aside, each once, sorted.
    public var holders: [String] {
        Array(Set(participants.compactMap { participant -> String? in
            guard participant.type != .owner, participant.acceptanceStatus == .accepted else { return nil }
            return participant.userRecordName
        })).sorted()
    }
}

/// The rules of changing a share, as pure functions: only the owner changes participants and
/// permissions; a participant may only remove themselves; nobody claims an acceptance for someone else.
public enum ShareRules {
    /// The most participants one share holds (Apple's limit for a share).
    public static let maxParticipants = 100

    /// The state a save leads to, or the error it gets. `current` is nil for a new share; `proposed`
    /// is what the client sent; `caller` is the user saving.
    public static func decide(current: ShareState?, proposed: ShareState, caller: String) throws(StratusError) -> ShareState {
        guard proposed.participants.count <= maxParticipants else {
            throw StratusError(.limitExceeded, "a share holds at most \(maxParticipants) participants")
        }
        var seen = Set<String>()
        for participant in proposed.participants where !seen.insert(participant.lookup.key).inserted {
            throw StratusError(.badRequest, "participants names a user twice")
        }
        guard let current else {
            guard caller == proposed.owner else { throw StratusError(.accessDenied, "only the zone's owner creates a share") }
            return normalized(proposed, previous: [:])
        }
        guard caller == current.owner else { return try leave(current: current, proposed: proposed, caller: caller) }
        guard proposed.owner == current.owner else { throw StratusError(.badRequest, "a share's owner never changes") }
        let previous = Dictionary(current.participants.map { ($0.lookup.key, $0) }, uniquingKeysWith: { first, _ in first })
        return normalized(proposed, previous: previous)
    }

    /// The owner's save: the owner first (OWNER, READ_WRITE, ACCEPTED), everyone else a USER whose
    /// acceptance is what the server knew (PENDING for someone new, whatever the client claims);
    /// a participant the owner leaves out is REMOVED.
    private static func normalized(_ proposed: ShareState, previous: [String: ShareParticipant]) -> ShareState {
        let ownerKey = ParticipantLookup.userRecordName(proposed.owner).key
        var participants = [ShareParticipant(lookup: .userRecordName(proposed.owner), permission: .readWrite, acceptanceStatus: .accepted, type: .owner)]
        var kept = Set([ownerKey])
        for participant in proposed.participants where participant.lookup.key != ownerKey {
            let known = previous[participant.lookup.key]
            let status: ShareAcceptanceStatus = participant.acceptanceStatus == .removed ? .removed : known.map { $0.acceptanceStatus == .removed ? .pending : $0.acceptanceStatus } ?? .pending
            participants.append(ShareParticipant(
                lookup: participant.lookup, permission: participant.permission == .none ? .readOnly : participant.permission,
                acceptanceStatus: status, type: known?.type == .publicUser ? .publicUser : .user, userRecordName: known?.userRecordName))
            kept.insert(participant.lookup.key)
        }
        for (key, dropped) in previous.sorted(by: { $0.key < $1.key }) where !kept.contains(key) && dropped.acceptanceStatus != .removed {
            participants.append(ShareParticipant(
                lookup: dropped.lookup, permission: dropped.permission, acceptanceStatus: .removed, type: dropped.type, userRecordName: dropped.userRecordName))
        }
        return ShareState(owner: proposed.owner, publicPermission: proposed.publicPermission, participants: participants)
    }

    /// A participant's save: allowed only when it removes the caller (leaves them out, or marks
    /// them REMOVED) and changes nothing else.
    private static func leave(current: ShareState, proposed: ShareState, caller: String) throws(StratusError) -> ShareState {
        let refused = StratusError(.accessDenied, "only the share's owner changes its participants and permissions; a participant may only remove themselves")
        guard let index = current.participants.firstIndex(where: { $0.isUser(caller) }), current.participants[index].acceptanceStatus != .removed else {
            throw refused
        }
        let callerKey = current.participants[index].lookup.key
        // What the save says about everyone else, which must be what the share holds.
        func others(_ state: ShareState) -> [String] {
            state.participants.filter { $0.lookup.key != callerKey && !$0.isUser(caller) }.map { "\($0.lookup.key) \($0.permission.rawValue)" }.sorted()
        }
        let callerStays = proposed.participants.contains { ($0.lookup.key == callerKey || $0.isUser(caller)) && $0.acceptanceStatus != .removed }
        guard !callerStays, proposed.owner == current.owner, proposed.publicPermission == current.publicPermission, others(proposed) == others(current) else {
            throw refused
        }
        var result = current
        result.participants[index].acceptanceStatus = .removed
        return result
    }
}
