import Foundation

/// Someone a share is for: a user of the container by record name, or an email address.
public struct ShareParticipant: Sendable, Hashable {
    public enum Permission: String, Sendable { case readOnly = "READ_ONLY", readWrite = "READ_WRITE" }
    public enum Lookup: Sendable, Hashable { case userRecordName(String), emailAddress(String) }
    public var lookup: Lookup
    public var permission: Permission
    /// As the server answered it: `PENDING`, `ACCEPTED`, `REMOVED`; nil on a participant being added.
    public var acceptanceStatus: String?

    public init(_ lookup: Lookup, permission: Permission) {
        self.lookup = lookup
        self.permission = permission
    }

    var wire: JSON {
        let info: JSON = switch lookup {
        case .userRecordName(let name): ["userRecordName": .string(name)]
        case .emailAddress(let address): ["emailAddress": .string(address)]
        }
        return ["userIdentity": ["lookupInfo": info], "permission": .string(permission.rawValue)]
    }
}

extension Record {
    /// The name of a share of a whole zone.
    public static let zoneShareName = "cloudkit.zoneshare"

    /// A share record (`cloudkit.share`) to save in the owner's zone: of the whole zone (no
    /// root), or of the hierarchy under `rootRecordName` (saved with or before the share).
    public static func share(
        zoneID: ZoneID, recordName: String = zoneShareName, rootRecordName: String? = nil,
        participants: [ShareParticipant], publicPermission: String = "NONE"
    ) -> Record {
        var share = Record(recordType: "cloudkit.share", recordID: RecordID(recordName: recordName, zoneID: zoneID))
        share.shareMembers["publicPermission"] = .string(publicPermission)
        share.shareMembers["participants"] = .array(participants.map(\.wire))
        if let rootRecordName { share.shareMembers["forRecord"] = ["recordName": .string(rootRecordName), "zoneID": zoneID.wire] }
        return share
    }

    /// A saved share's short GUID, which participants accept it by.
    public var shareShortGUID: String? { shareMembers["shortGUID"]?.string }

    /// A saved share's participants as the server answered them.
    public var shareParticipants: [ShareParticipant] {
        (shareMembers["participants"]?.array ?? []).compactMap { entry in
            let info = entry["userIdentity"]?["lookupInfo"]
            let lookup: ShareParticipant.Lookup
            if let name = entry["userIdentity"]?["userRecordName"]?.string ?? info?["userRecordName"]?.string {
                lookup = .userRecordName(name)
            } else if let address = info?["emailAddress"]?.string {
                lookup = .emailAddress(address)
            } else {
                return nil
            }
            var participant = ShareParticipant(lookup, permission: entry["permission"]?.string.flatMap(ShareParticipant.Permission.init(rawValue:)) ?? .readOnly)
            participant.acceptanceStatus = entry["acceptanceStatus"]?.string
            return participant
        }
    }
}
