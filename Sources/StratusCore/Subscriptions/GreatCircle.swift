import Foundation

/// The great-circle (haversine) distance NEAR and distance sorts use, written as `QueryStore`
/// writes it in SQL — same constants, same order of operations, the same C library functions — so
/// a record at the boundary of a NEAR circle falls on the same side in memory as in the index.
enum GreatCircle {
    /// The Earth's mean radius in metres.
    static let earthRadius = 6371008.8
    /// PostgreSQL's `RADIANS_PER_DEGREE`, by which `radians()` multiplies.
    static let radiansPerDegree = 0.0174532925199432957692

    /// The distance in metres from `point` to `location`; nil where PostgreSQL would stop the query
    /// with an error (`asin` of a value rounded past 1, possible only for nearly antipodal points).
    static func distance(from point: Location, to location: Location) -> Double? {
        let lat = location.latitude, lon = location.longitude, lat0 = point.latitude, lon0 = point.longitude
        let first = pow(sin((lat - lat0) * radiansPerDegree / 2), 2)
        let second = cos(lat0 * radiansPerDegree) * cos(lat * radiansPerDegree) * pow(sin((lon - lon0) * radiansPerDegree / 2), 2)
        let root = sqrt(first + second)
        guard root >= -1, root <= 1 else { return nil }
        return 2 * earthRadius * asin(root)
    }

    /// `distance <= metres` as `float8` compares: NaN is above every number.
    static func isWithin(_ distance: Double, metres: Double) -> Bool {
        metres.isNaN || distance <= metres
    }
}
