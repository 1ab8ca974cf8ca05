import Crypto
import Foundation

/// A secret Stratus must send somewhere later (a trusted issuer's client secret), as the database
/// keeps it: sealed with AES-256-GCM under a key derived from the server's secret key (HKDF-SHA256,
/// info `stratus/v2/seal/<purpose>`), bound to the row it belongs to, so a dump of the database
/// alone does not reveal it and a sealed value copied into another row does not open.
///
/// The bytes: `0x01 ‖ nonce (12) ‖ ciphertext ‖ tag (16)`.
public struct SealedSecret: Sendable, Equatable {
    /// The format's first byte.
    public static let version: UInt8 = 1
    /// The longest sealed value read: a secret of `TrustedIssuer.maxClientSecretBytes` and the overhead.
    public static let maxBytes = 1 + 12 + TrustedIssuer.maxClientSecretBytes + 16

    /// What the secret is for; its own key is derived for each.
    public enum Purpose: String, Sendable {
        /// A trusted issuer's web client secret, sent to its token endpoint.
        case clientSecret = "client-secret"
    }

    /// The sealed bytes, as stored.
    public var bytes: [UInt8]

    /// Wraps sealed bytes read from storage.
    public init(bytes: [UInt8]) { self.bytes = bytes }

    /// Seals `secret` for the row named by `binding` (e.g. the container and the issuer).
    public static func seal(_ secret: String, purpose: Purpose, binding: [String], key: SecretKey) -> SealedSecret {
        // AES-GCM with a fresh random nonce and a 32-byte key never fails.
        let box = try! AES.GCM.seal(Data(secret.utf8), using: key.sealingKey(purpose), authenticating: Self.associatedData(purpose, binding))
        return SealedSecret(bytes: [version] + Array(box.combined!))
    }

    /// The secret, once the bytes are a value this server's key sealed for this row; otherwise a
    /// clear AUTHENTICATION_FAILED that names what to do, never the secret.
    public func open(purpose: Purpose, binding: [String], key: SecretKey) throws(StratusError) -> String {
        guard bytes.count <= Self.maxBytes, bytes.count > 1 + 12 + 16, bytes.first == Self.version,
              let box = try? AES.GCM.SealedBox(combined: Data(bytes.dropFirst())),
              let opened = try? AES.GCM.open(box, using: key.sealingKey(purpose), authenticating: Self.associatedData(purpose, binding)),
              let secret = String(data: opened, encoding: .utf8)
        else {
            throw StratusError(
                .authenticationFailed,
                "the stored \(purpose.rawValue.replacingOccurrences(of: "-", with: " ")) does not open with this server's key "
                    + "(stored under another STRATUS_SECRET_KEY, or damaged): an operator must set it again")
        }
        return secret
    }

    static func associatedData(_ purpose: Purpose, _ binding: [String]) -> Data {
        Data((["stratus/v1/sealed", purpose.rawValue] + binding).joined(separator: "\u{1F}").utf8)
    }
}

extension SecretKey {
    /// The key secrets of `purpose` are sealed with.
    func sealingKey(_ purpose: SealedSecret.Purpose) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(inputKeyMaterial: SymmetricKey(data: bytes), info: Data("stratus/v2/seal/\(purpose.rawValue)".utf8), outputByteCount: 32)
    }
}
