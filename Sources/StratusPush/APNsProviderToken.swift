import Crypto
import Foundation

/// The APNs provider token: a JWT signed with ES256 whose header names the key and whose claims
/// name the team and the time it was made.
enum APNsProviderToken {
    /// `base64url(header).base64url(claims).base64url(r‖s)`.
    static func make(teamID: String, keyID: String, issuedAt: Int64, privateKey: P256.Signing.PrivateKey) throws -> String {
        let header = try json(["alg": .text("ES256"), "kid": .text(keyID)])
        let claims = try json(["iss": .text(teamID), "iat": .number(issuedAt)])
        let signingInput = base64URL(header) + "." + base64URL(claims)
        // JWS wants the raw 64-byte r‖s, not the DER form swift-crypto also offers.
        let signature = try privateKey.signature(for: Data(signingInput.utf8)).rawRepresentation
        return signingInput + "." + base64URL(signature)
    }

    /// Base64url without padding (RFC 7515 §2).
    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    private enum Value: Encodable {
        case text(String)
        case number(Int64)

        func encode(to encoder: any Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case .text(let text): try container.encode(text)
            case .number(let number): try container.encode(number)
            }
        }
    }

    private static func json(_ object: [String: Value]) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(object)
    }
}
