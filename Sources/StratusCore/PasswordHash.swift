import _CryptoExtras
import Crypto
import Foundation

/// Password hashes of the built-in user directory: PBKDF2-HMAC-SHA256 with a random salt.
///
/// Text form: `pbkdf2-sha256$ROUNDS$base64(salt)$base64(hash)`, so the work factor can rise later
/// without invalidating stored hashes.
public enum PasswordHash {
    /// The work factor for new hashes.
    public static let defaultRounds = 210_000
    /// The shortest password the directory accepts.
    public static let minimumLength = 8

    /// Hashes a password.
    public static func make(_ password: String, rounds: Int = defaultRounds) throws(StratusError) -> String {
        guard password.count >= minimumLength else {
            throw StratusError(.badRequest, "a password needs at least \(minimumLength) characters")
        }
        var generator = SystemRandomNumberGenerator()
        let salt = (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
        guard let hash = derive(password, salt: salt, rounds: rounds) else {
            throw StratusError(.internalError, "password hashing failed")
        }
        return "pbkdf2-sha256$\(rounds)$\(Data(salt).base64EncodedString())$\(Data(hash).base64EncodedString())"
    }

    /// Whether a password matches a stored hash; false for a malformed hash.
    public static func verify(_ password: String, against encoded: String) -> Bool {
        let parts = encoded.split(separator: "$", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "pbkdf2-sha256", let rounds = Int(parts[1]), rounds > 0, rounds <= 10_000_000,
              let salt = Data(base64Encoded: String(parts[2])), let expected = Data(base64Encoded: String(parts[3])),
              let actual = derive(password, salt: Array(salt), rounds: rounds), actual.count == expected.count
        else { return false }
        // Compare in constant time.
        var difference: UInt8 = 0
        for (left, right) in zip(actual, expected) { difference |= left ^ right }
        return difference == 0
    }

    /// The stored hash of a user who signs in only through an issuer (an ID token): no password
    /// matches it (`verify` answers false for anything not of the text form above).
    public static let noPassword = "!"

    /// A hash of nothing in particular, to spend the same time on an unknown login as on a known one.
    public static let decoy: String = {
        // 16 zero bytes of salt and 32 of hash: never matches a real derivation in practice.
        "pbkdf2-sha256$\(defaultRounds)$\(Data(count: 16).base64EncodedString())$\(Data(count: 32).base64EncodedString())"
    }()

    static func derive(_ password: String, salt: [UInt8], rounds: Int) -> [UInt8]? {
        guard let key = try? KDF.Insecure.PBKDF2.deriveKey(
            from: Data(password.utf8), salt: salt, using: .sha256, outputByteCount: 32, unsafeUncheckedRounds: rounds)
        else { return nil }
        return key.withUnsafeBytes { Array($0) }
    }
}

/// User record names are container-scoped and opaque: `_` + 32 hex digits, never a login.
public enum UserRecordName {
    /// A new user record name.
    public static func generate() -> String { "_" + APIToken.generate().prefix(32) }
}
