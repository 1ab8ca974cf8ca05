import PostgresNIO
import StratusCore

extension PostgresQuery.StringInterpolation {
    /// The condition that names one zone by its five key columns — `container`, `environment`,
    /// `scope`, `owner` and `zone_name` — each a bind parameter: written here once for every table
    /// keyed that way.
    mutating func appendInterpolation(zone zoneName: String, of database: DatabaseID) {
        appendLiteral("container = ")
        appendInterpolation(database.container)
        appendLiteral(" AND environment = ")
        appendInterpolation(database.environment.rawValue)
        appendLiteral(" AND scope = ")
        appendInterpolation(database.scope.rawValue)
        appendLiteral(" AND owner = ")
        appendInterpolation(database.owner)
        appendLiteral(" AND zone_name = ")
        appendInterpolation(zoneName)
    }
}

extension Sequence {
    /// The elements grouped by the zone `key` names, zones in the order they first appear (so the
    /// statements a batch makes per zone come in a stable order).
    func groupedByZone(_ key: (Element) -> ZoneKey) -> [[Element]] {
        var groups: [[Element]] = []
        var index: [ZoneKey: Int] = [:]
        for element in self {
            let zone = key(element)
            if let at = index[zone] {
                groups[at].append(element)
            } else {
                index[zone] = groups.count
                groups.append([element])
            }
        }
        return groups
    }
}
