import Foundation

extension ShareState {
    /// Reads a `cloudkit.share` record's sharing keys as a client sends them: `publicPermission`
    /// (NONE, READ_ONLY, READ_WRITE; absent: NONE) and `participants`, each
    /// `{userIdentity: {userRecordName?, lookupInfo: {emailAddress | userRecordName}}, permission,
    /// acceptanceStatus?, type?}` (`UNKNOWN` counts as absent). Bad input is BAD_REQUEST naming the place.
    public static func parse(owner: String, publicPermission: JSONValue?, participants: JSONValue?) throws(StratusError) -> ShareState {
        var state = ShareState(owner: owner)
        if let publicPermission, publicPermission != .null {
            state.publicPermission = try enumValue(SharePermission.self, publicPermission, "publicPermission") ?? .none
        }
        guard let participants, participants != .null else { return state }
        guard case .array(let list) = participants else { throw StratusError(.badRequest, "participants must be a list") }
        guard list.count <= ShareRules.maxParticipants + 1 else {
            throw StratusError(.limitExceeded, "a share holds at most \(ShareRules.maxParticipants) participants")
        }
        for (index, element) in list.enumerated() {
            state.participants.append(try participant(element, "participants[\(index)]"))
        }
        return state
    }

    /// The `participants` of a share record as the server answers them.
    public var participantsJSON: JSONValue {
        .array(participants.map { participant in
            var lookupInfo: [String: JSONValue] = [:]
            switch participant.lookup {
            case .userRecordName(let name): lookupInfo["userRecordName"] = .string(name)
            case .emailAddress(let email): lookupInfo["emailAddress"] = .string(email)
            }
            var identity: [String: JSONValue] = ["lookupInfo": .object(lookupInfo)]
            if let user = participant.userRecordName { identity["userRecordName"] = .string(user) }
            return .object([
                "userIdentity": .object(identity), "permission": .string(participant.permission.rawValue),
                "acceptanceStatus": .string(participant.acceptanceStatus.rawValue), "type": .string(participant.type.rawValue),
            ])
        })
    }

    private static func participant(_ json: JSONValue, _ place: String) throws(StratusError) -> ShareParticipant {
        guard case .object(let members) = json, case .object(let identity)? = members["userIdentity"] else {
            throw StratusError(.badRequest, "\(place) must be a participant dictionary with a userIdentity")
        }
        let lookupInfo: [String: JSONValue]
        switch identity["lookupInfo"] {
        case .object(let info)?: lookupInfo = info
        case nil, .null?: lookupInfo = [:]
        default: throw StratusError(.badRequest, "\(place).userIdentity.lookupInfo must be a dictionary")
        }
        let lookup: ParticipantLookup
        if case .string(let email)? = lookupInfo["emailAddress"] {
            lookup = .emailAddress(try UserIdentityText.email(email, "\(place).userIdentity.lookupInfo.emailAddress"))
        } else if case .string(let name)? = lookupInfo["userRecordName"] ?? identity["userRecordName"] {
            lookup = .userRecordName(try UserIdentityText.userRecordName(name, "\(place).userIdentity.userRecordName"))
        } else {
            throw StratusError(.badRequest, "\(place).userIdentity must name a user: lookupInfo.emailAddress or userRecordName")
        }
        let permission = try members["permission"].map { json throws(StratusError) in try enumValue(SharePermission.self, json, "\(place).permission") }
        let status = try members["acceptanceStatus"].map { json throws(StratusError) in
            try enumValue(ShareAcceptanceStatus.self, json, "\(place).acceptanceStatus")
        }
        let type = try members["type"].map { json throws(StratusError) in try enumValue(ShareParticipantType.self, json, "\(place).type") }
        return ShareParticipant(lookup: lookup, permission: (permission ?? nil) ?? .readOnly, acceptanceStatus: (status ?? nil) ?? .pending, type: (type ?? nil) ?? .user)
    }

    /// An enumeration's value from its CloudKit name; nil for `UNKNOWN` or null.
    private static func enumValue<T: RawRepresentable & CaseIterable>(_ type: T.Type, _ json: JSONValue, _ place: String) throws(StratusError) -> T?
    where T.RawValue == String {
        switch json {
        case .null: return nil
        case .string("UNKNOWN"): return nil
        case .string(let text):
            guard let value = T(rawValue: text) else {
                throw StratusError(.badRequest, "\(place) must be one of \(T.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return value
        default:
            throw StratusError(.badRequest, "\(place) must be a string")
        }
    }
}
