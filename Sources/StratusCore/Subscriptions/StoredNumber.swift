/// A number as PostgreSQL's `numeric` holds it, so comparisons in memory agree with the query
/// index's: the index stores a double as the decimal text the event encoder wrote (its shortest
/// round-trip digits) and compares that decimal exactly, not the binary value. An INT64
/// 1152921504606846976 (2^60) is therefore not equal to the DOUBLE 2^60, whose text is
/// `1.152921504606847e+18`.
struct StoredNumber: Hashable, Comparable, Sendable {
    /// Ordered as `numeric` orders them: −Infinity < finite < +Infinity < NaN.
    enum Kind: Int, Hashable, Sendable { case negativeInfinity = 0, finite = 1, positiveInfinity = 2, notANumber = 3 }

    let kind: Kind
    /// For finite non-zero values.
    let negative: Bool
    /// Significant digits (0…9), no leading or trailing zeros; empty for zero.
    let digits: [UInt8]
    /// The value is 0.d₁d₂… × 10^point.
    let point: Int
    /// The digits after the decimal point `numeric` shows (its display scale); not part of equality.
    let scale: Int

    private init(kind: Kind, negative: Bool = false, digits: [UInt8] = [], point: Int = 0, scale: Int = 0) {
        self.kind = kind
        self.negative = negative
        self.digits = digits
        self.point = point
        self.scale = scale
    }

    /// A whole number.
    init(_ value: Int64) {
        self = StoredNumber(text: String(value)) ?? StoredNumber(kind: .notANumber)
    }

    /// A double as the event encoder writes it into the stored record: its shortest round-trip text
    /// without a trailing `.0`.
    init(stored value: Double) {
        var text = value.description
        if text.hasSuffix(".0") { text.removeLast(2) }
        self.init(text: text, nonFinite: value)
    }

    /// A double as `QueryStore` binds a filter value: `String(value)` cast to `numeric`.
    init(bound value: Double) {
        self.init(text: String(value), nonFinite: value)
    }

    private init(text: String, nonFinite value: Double) {
        if value.isNaN {
            self.init(kind: .notANumber)
        } else if value.isInfinite {
            self.init(kind: value < 0 ? .negativeInfinity : .positiveInfinity)
        } else {
            self = StoredNumber(text: text) ?? StoredNumber(kind: .notANumber)
        }
    }

    /// Reads decimal text (`-12.5`, `1e+20`, `1.5e-07`) as `numeric_in` does.
    init?(text: String) {
        var bytes = Array(text.utf8)[...]
        var negative = false
        if let sign = bytes.first, sign == UInt8(ascii: "-") || sign == UInt8(ascii: "+") {
            negative = sign == UInt8(ascii: "-")
            bytes = bytes.dropFirst()
        }
        var all: [UInt8] = []
        var fractionCount = 0
        var seenPoint = false
        while let byte = bytes.first, byte != UInt8(ascii: "e"), byte != UInt8(ascii: "E") {
            bytes = bytes.dropFirst()
            if byte == UInt8(ascii: ".") {
                guard !seenPoint else { return nil }
                seenPoint = true
            } else if (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) {
                all.append(byte - UInt8(ascii: "0"))
                if seenPoint { fractionCount += 1 }
            } else {
                return nil
            }
        }
        guard !all.isEmpty else { return nil }
        var exponent = 0
        if !bytes.isEmpty {
            guard let parsed = Int(String(decoding: bytes.dropFirst(), as: UTF8.self)) else { return nil }
            exponent = parsed
        }
        var point = all.count - fractionCount + exponent
        let leading = all.prefix { $0 == 0 }.count
        all.removeFirst(leading)
        point -= leading
        while all.last == 0 { all.removeLast() }
        let scale = max(0, fractionCount - exponent)
        if all.isEmpty {
            self.init(kind: .finite, scale: scale)
        } else {
            self.init(kind: .finite, negative: negative, digits: all, point: point, scale: scale)
        }
    }

    /// The text `numeric` shows: no exponent, exactly `scale` digits after the point (`1e+20` shows
    /// as `100000000000000000000`, `1.5e-07` as `0.00000015`).
    var text: String {
        switch kind {
        case .notANumber: return "NaN"
        case .positiveInfinity: return "Infinity"
        case .negativeInfinity: return "-Infinity"
        case .finite: break
        }
        func digit(_ position: Int) -> Character {
            // Position 0 is the first digit after the point 0.d₁…; digits outside `digits` are zeros.
            let index = position
            return index >= 0 && index < digits.count ? Character(String(digits[index])) : "0"
        }
        var result = negative ? "-" : ""
        if point > 0 {
            for position in 0..<point { result.append(digit(position)) }
        } else {
            result.append("0")
        }
        if scale > 0 {
            result.append(".")
            for offset in 0..<scale { result.append(digit(point + offset)) }
        }
        return result
    }

    static func == (lhs: StoredNumber, rhs: StoredNumber) -> Bool {
        lhs.kind == rhs.kind && (lhs.kind != .finite || (lhs.negative == rhs.negative && lhs.digits == rhs.digits && lhs.point == rhs.point))
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(kind)
        guard kind == .finite else { return }
        hasher.combine(negative)
        hasher.combine(digits)
        hasher.combine(point)
    }

    static func < (lhs: StoredNumber, rhs: StoredNumber) -> Bool {
        guard lhs.kind == .finite, rhs.kind == .finite else { return lhs.kind.rawValue < rhs.kind.rawValue }
        let left = lhs.signum, right = rhs.signum
        guard left == right else { return left < right }
        if left == 0 { return false }
        let magnitudeLess = lhs.point != rhs.point ? lhs.point < rhs.point : lhs.digits.lexicographicallyPrecedes(rhs.digits)
        let magnitudeEqual = lhs.point == rhs.point && lhs.digits == rhs.digits
        return left > 0 ? magnitudeLess : !magnitudeLess && !magnitudeEqual
    }

    private var signum: Int { digits.isEmpty ? 0 : negative ? -1 : 1 }
}
