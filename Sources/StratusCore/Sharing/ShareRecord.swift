import Foundation

/// The share record as CloudKit names it: a record of type `cloudkit.share` in an owner's custom
/// zone. A hierarchy share has a root record whose `share` field points at it; the share named
/// `cloudkit.zoneshare` is zone-wide and shares every record of its zone.
public enum ShareRecord {
    /// The record type of every share record.
    public static let recordType = "cloudkit.share"
    /// The record name of a zone-wide share.
    public static let zoneShareName = "cloudkit.zoneshare"

    /// Whether a record of this type is a share record.
    public static func isShare(_ recordType: String) -> Bool { recordType == Self.recordType }

    /// Whether the share of this name is zone-wide.
    public static func isZoneWide(_ recordName: String) -> Bool { recordName == zoneShareName }

    /// The share URL: `template` with `{container}` and `{shortGUID}` replaced (each percent-encoded
    /// for a path).
    public static func url(template: String, container: String, shortGUID: String) -> String {
        let encode = { (text: String) in text.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? text }
        return template.replacingOccurrences(of: "{container}", with: encode(container)).replacingOccurrences(of: "{shortGUID}", with: encode(shortGUID))
    }
}

/// What a save of a share record says about its sharing: each part nil when the client did not send
/// it, so a save that changes only the title keeps the participants.
public struct ShareProposal: Sendable, Hashable {
    /// `publicPermission`, if sent.
    public var publicPermission: SharePermission?
    /// `participants`, if sent.
    public var participants: [ShareParticipant]?

    /// Creates a proposal.
    public init(publicPermission: SharePermission? = nil, participants: [ShareParticipant]? = nil) {
        self.publicPermission = publicPermission
        self.participants = participants
    }

    /// Reads the keys of a share record as a client sends them (`ShareState.parse`); absent keys stay nil.
    public static func parse(publicPermission: JSONValue?, participants: JSONValue?) throws(StratusError) -> ShareProposal {
        let state = try ShareState.parse(owner: "", publicPermission: publicPermission, participants: participants)
        return ShareProposal(
            publicPermission: publicPermission == nil ? nil : state.publicPermission, participants: participants == nil ? nil : state.participants)
    }

    /// The whole state the save proposes: what was sent, and the rest from `current` (or a new
    /// share's defaults: private, the owner alone).
    public func state(owner: String, current: ShareState?) -> ShareState {
        ShareState(
            owner: owner, publicPermission: publicPermission ?? current?.publicPermission ?? .none,
            participants: participants ?? current?.participants ?? [])
    }
}

extension ShareState {
    /// The participant `user` is, if any (by user record name, or the place they accepted).
    public func participant(_ user: String) -> ShareParticipant? {
        participants.first { $0.isUser(user) }
    }

    /// What `user` may do with the shared records: an accepted participant's permission, or NONE.
    public func permission(of user: String) -> SharePermission {
        guard let participant = participant(user), participant.acceptanceStatus == .accepted else { return .none }
        return participant.permission
    }
}

extension ShareRules {
    /// The participant `user` (whose directory email address is `email`) is: named by user record
    /// name, by the place they accepted, or invited by that email address.
    public static func participantIndex(in state: ShareState, user: String, email: String?) -> Int? {
        if let index = state.participants.firstIndex(where: { $0.isUser(user) }) { return index }
        guard let email else { return nil }
        let key = ParticipantLookup.emailAddress(email).key
        return state.participants.firstIndex { $0.lookup.key == key && $0.userRecordName == nil }
    }

    /// The state after `user` accepts the share (records/accept): an invited participant becomes
    /// ACCEPTED and takes `user`'s name; anyone else signed in joins a public share as PUBLIC_USER
    /// with its public permission. nil: nothing changes (already accepted, or the owner). A stranger
    /// to a private share gets NOT_FOUND (no hint that it exists); a removed participant ACCESS_DENIED.
    public static func accept(_ current: ShareState, user: String, email: String?) throws(StratusError) -> ShareState? {
        var state = current
        if let index = participantIndex(in: current, user: user, email: email) {
            switch current.participants[index].acceptanceStatus {
            case .accepted:
                return nil
            case .removed:
                throw StratusError(.accessDenied, "The caller was removed from this share; only its owner can invite them again")
            case .pending:
                state.participants[index].acceptanceStatus = .accepted
                state.participants[index].userRecordName = user
                return state
            }
        }
        guard current.publicPermission != .none else { throw StratusError(.notFound, "No share has this short GUID") }
        guard current.participants.count <= maxParticipants else {
            throw StratusError(.limitExceeded, "The share holds \(maxParticipants) participants; no one else can join")
        }
        state.participants.append(ShareParticipant(
            lookup: .userRecordName(user), permission: current.publicPermission, acceptanceStatus: .accepted, type: .publicUser))
        return state
    }
}
