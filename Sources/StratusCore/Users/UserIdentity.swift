import Foundation

/// The parts of a user's name, as CloudKit's `nameComponents` dictionary names them.
public struct NameComponents: Sendable, Equatable {
    /// The first name.
    public var givenName: String?
    /// The last name.
    public var familyName: String?

    /// Creates name components.
    public init(givenName: String? = nil, familyName: String? = nil) {
        self.givenName = givenName
        self.familyName = familyName
    }

    /// Whether neither part is known.
    public var isEmpty: Bool { givenName == nil && familyName == nil }
}

/// What the user directory holds about a user beyond the login: the email address, the name and
/// whether the user lets other users find them. Only a discoverable user's email and name are ever
/// shown to anyone (the user included, as on Apple's service); everyone else is known by the opaque
/// user record name alone.
public struct UserIdentity: Sendable, Equatable {
    /// The container-scoped user record name.
    public var userRecordName: String
    /// The email address, as the user gave it.
    public var emailAddress: String?
    /// The name.
    public var nameComponents: NameComponents
    /// Whether users/discover and users/lookup/* find the user.
    public var discoverable: Bool

    /// Creates an identity.
    public init(userRecordName: String, emailAddress: String? = nil, nameComponents: NameComponents = NameComponents(), discoverable: Bool = false) {
        self.userRecordName = userRecordName
        self.emailAddress = emailAddress
        self.nameComponents = nameComponents
        self.discoverable = discoverable
    }
}

/// A change to a user's identity: each part that is not nil is set, an empty string clears a text part.
public struct UserIdentityChange: Sendable, Equatable {
    /// The new email address ("" clears it).
    public var emailAddress: String?
    /// The new first name ("" clears it).
    public var givenName: String?
    /// The new last name ("" clears it).
    public var familyName: String?
    /// The new discoverability.
    public var discoverable: Bool?

    /// Creates a change; a part left nil stays as it is.
    public init(emailAddress: String? = nil, givenName: String? = nil, familyName: String? = nil, discoverable: Bool? = nil) {
        self.emailAddress = emailAddress
        self.givenName = givenName
        self.familyName = familyName
        self.discoverable = discoverable
    }

    /// Whether the change changes nothing.
    public var isEmpty: Bool { emailAddress == nil && givenName == nil && familyName == nil && discoverable == nil }

    /// The change with its text checked and trimmed (empty text stays empty: it clears).
    public func validated() throws(StratusError) -> UserIdentityChange {
        var change = self
        if let emailAddress { change.emailAddress = emailAddress.isEmpty ? "" : try UserIdentityText.email(emailAddress) }
        if let givenName { change.givenName = givenName.isEmpty ? "" : try UserIdentityText.name(givenName, "givenName") }
        if let familyName { change.familyName = familyName.isEmpty ? "" : try UserIdentityText.name(familyName, "familyName") }
        return change
    }
}

/// The rules for the text of a user identity, for what an operator stores and what a client looks up.
public enum UserIdentityText {
    /// The longest email address (RFC 5321's path limit).
    public static let maxEmailBytes = 254
    /// The longest name component.
    public static let maxNameBytes = 255

    /// An email address: trimmed, 3 to 254 bytes, one `@` with text on both sides, no whitespace or
    /// control characters. Stored as given; compared without regard to capitals.
    public static func email(_ text: String, _ place: String = "emailAddress") throws(StratusError) -> String {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        let parts = trimmed.split(separator: "@", omittingEmptySubsequences: false)
        guard trimmed.utf8.count <= maxEmailBytes, parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty,
              !trimmed.unicodeScalars.contains(where: { $0.properties.isWhitespace || $0.properties.generalCategory == .control })
        else {
            throw StratusError(.badRequest, "\(place) must be an email address: 3 to \(maxEmailBytes) bytes, one '@', no spaces or control characters")
        }
        return trimmed
    }

    /// A name component: trimmed, 1 to 255 bytes, no control characters.
    public static func name(_ text: String, _ place: String) throws(StratusError) -> String {
        let trimmed = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !trimmed.isEmpty, trimmed.utf8.count <= maxNameBytes,
              !trimmed.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
        else {
            throw StratusError(.badRequest, "\(place) must be 1 to \(maxNameBytes) bytes without control characters")
        }
        return trimmed
    }

    /// A user record name a client sends: 1 to 255 bytes, no NUL or other control characters.
    public static func userRecordName(_ text: String, _ place: String) throws(StratusError) -> String {
        try ClientText.check(text, place)
        guard !text.isEmpty, text.utf8.count <= 255, !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw StratusError(.badRequest, "\(place) must be 1 to 255 bytes without control characters")
        }
        return text
    }
}
