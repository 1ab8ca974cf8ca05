/// A record name compared by its exact UTF-8 bytes, as PostgreSQL compares it.
///
/// Swift's `String` equality is canonical equivalence: "é" written as U+00E9 equals "e" followed by
/// U+0301, and "K" equals the Kelvin sign U+212A. PostgreSQL stores and compares the bytes, so two
/// names Swift calls equal can be two records. Sets and dictionaries of record names are keyed by
/// this type, so each record keeps its own entry.
public struct ExactName: Hashable, Sendable, CustomStringConvertible {
    /// The name, exactly as sent or stored.
    public let name: String

    /// Wraps a name.
    public init(_ name: String) { self.name = name }

    public static func == (lhs: ExactName, rhs: ExactName) -> Bool {
        lhs.name.utf8.elementsEqual(rhs.name.utf8)
    }

    public func hash(into hasher: inout Hasher) {
        // The same bytes are fed whether or not the string is stored contiguously.
        let hashed: Void? = name.utf8.withContiguousStorageIfAvailable { hasher.combine(bytes: UnsafeRawBufferPointer($0)) }
        if hashed == nil {
            Array(name.utf8).withUnsafeBytes { hasher.combine(bytes: $0) }
        }
    }

    public var description: String { name }
}
