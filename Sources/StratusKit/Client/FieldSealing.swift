import Crypto
import Foundation

/// Where the keys of encrypted fields come from: the app's own (its keychain, a key it derives
/// from the user's passphrase, …). The server never sees them. A value is sealed under the
/// current key and names its id, so keys can be rotated: older values open with the key of
/// their id.
public protocol FieldKeyProvider: Sendable {
    /// The key new values are sealed under, and its id (at most 255 bytes of UTF-8).
    func currentKey() throws -> (id: String, key: SymmetricKey)
    /// The key of an id; nil when this device does not have it.
    func key(id: String) throws -> SymmetricKey?
}

/// A key provider of fixed keys (tests, or an app that loads its keys up front).
public struct StaticKeyProvider: FieldKeyProvider {
    public var current: String
    /// Each key's bytes (the cryptography package's key type is not `Sendable`).
    var keys: [String: Data]

    public init(current: String, keys: [String: SymmetricKey]) {
        self.current = current
        self.keys = keys.mapValues { $0.withUnsafeBytes { Data($0) } }
    }

    public func currentKey() throws -> (id: String, key: SymmetricKey) {
        guard let key = keys[current] else { throw StratusKitError(code: .missingKey, reason: "no key \(current)") }
        return (current, SymmetricKey(data: key))
    }

    public func key(id: String) throws -> SymmetricKey? { keys[id].map { SymmetricKey(data: $0) } }
}

/// Sealing and opening encrypted values, on the device: AES-GCM (256-bit keys) over the value's
/// field dictionary, authenticated together with its record type and field name (a sealed value
/// moved to another field or type does not open). The wire carries
/// `{"type": "BYTES", "value": base64(sealed), "isEncrypted": true}`, sealed being
/// `"\0SKE" | 0x01 | key id length | key id | nonce | ciphertext | tag`. The server keeps a
/// `BYTES` value as it is (no index, no search) and does not keep `isEncrypted`, so a value read
/// back is known sealed by its first four bytes.
public enum FieldSealing {
    static let magic: [UInt8] = [0, 0x53, 0x4B, 0x45]
    static let version: UInt8 = 1

    /// Whether bytes are a sealed value of this client (its magic and version).
    static func isSealed(_ data: Data) -> Bool {
        data.count > magic.count + 2 && data.prefix(magic.count).elementsEqual(magic) && data[data.startIndex + magic.count] == version
    }

    /// The sealed bytes of `record`'s encrypted values (and its sealed values not opened, as they are).
    public static func seal(_ record: Record, with provider: (any FieldKeyProvider)?) throws -> [String: Data] {
        var sealed = record.sealedValues
        guard !record.encryptedValues.isEmpty else { return sealed }
        guard let provider else {
            throw StratusKitError(code: .missingKey, reason: "record \(record.recordID.recordName) has encrypted values and the container has no key provider")
        }
        let (id, key) = try provider.currentKey()
        let idBytes = Array(id.utf8)
        guard !idBytes.isEmpty, idBytes.count <= 255 else { throw StratusKitError.invalidArgument("a key id must be 1 to 255 bytes") }
        for (field, value) in record.encryptedValues {
            let box = try AES.GCM.seal(value.wire.encoded(), using: key, authenticating: associatedData(record.recordType, field))
            guard let combined = box.combined else { throw StratusKitError(code: .missingKey, reason: "sealing \(field) failed") }
            sealed[field] = Data(magic + [version, UInt8(idBytes.count)] + idBytes) + combined
        }
        return sealed
    }

    /// `record` with its sealed values opened into `encryptedValues`. `strict`: a value whose key
    /// is missing, or that does not open, throws (`MISSING_KEY`, `DECRYPTION_FAILED`); otherwise it
    /// stays in `sealedValues`.
    public static func open(_ record: Record, with provider: (any FieldKeyProvider)?, strict: Bool = true) throws -> Record {
        var record = record
        for (field, data) in record.sealedValues {
            do {
                guard let provider else { throw StratusKitError(code: .missingKey, reason: "field \(field) is encrypted and the container has no key provider") }
                record.encryptedValues[field] = try open(data, field: field, recordType: record.recordType, provider: provider)
                record.sealedValues[field] = nil
            } catch let error as StratusKitError where !strict && (error.code == .missingKey || error.code == .decryptionFailed) {
                continue
            }
        }
        return record
    }

    static func open(_ data: Data, field: String, recordType: String, provider: any FieldKeyProvider) throws -> FieldValue {
        let bytes = [UInt8](data)
        let header = magic.count + 2
        guard isSealed(data), bytes.count > header + Int(bytes[magic.count + 1]) else {
            throw StratusKitError(code: .decryptionFailed, reason: "field \(field) is not a sealed value of this client")
        }
        let idLength = Int(bytes[magic.count + 1])
        let id = String(decoding: bytes[header..<(header + idLength)], as: UTF8.self)
        guard let key = try provider.key(id: id) else {
            throw StratusKitError(code: .missingKey, reason: "field \(field) is sealed under key \(id.prefix(64)), which this device does not have")
        }
        do {
            let box = try AES.GCM.SealedBox(combined: Data(bytes[(header + idLength)...]))
            let plain = try AES.GCM.open(box, using: key, authenticating: associatedData(recordType, field))
            guard let value = FieldValue(wire: try JSON.decode(plain)) else { throw StratusKitError(code: .decryptionFailed, reason: "field \(field) opened to no value") }
            return value
        } catch let error as StratusKitError {
            throw error
        } catch {
            throw StratusKitError(code: .decryptionFailed, reason: "field \(field) does not open with key \(id.prefix(64))")
        }
    }

    static func associatedData(_ recordType: String, _ field: String) -> Data { Data("stratuskit.field.v1\u{0}\(recordType)\u{0}\(field)".utf8) }
}
