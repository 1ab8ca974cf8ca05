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

    /// The condition that `column` is one of a zone's record names: `column = $n` for one name (or
    /// none, bound as NULL, which no row matches), `column = ANY($n)` for several. With one name and
    /// the zone's key, a statement names one row of a primary key, so its generic plan reads that
    /// key however young the table's statistics, and it may run prepared (`RecordKeys.single`);
    /// with `ANY` the generic plan guesses the list's length and may read the zone's version index.
    mutating func appendInterpolation(recordNames names: [String], column: String = "record_name") {
        appendLiteral(column)
        if names.count <= 1 {
            appendLiteral(" = ")
            appendInterpolation(names.first)
        } else {
            appendLiteral(" = ANY(")
            appendInterpolation(names)
            appendLiteral(")")
        }
    }
}

/// Record names in a statement's condition (`\(recordNames:)`).
enum RecordKeys {
    /// Whether a statement whose condition names `names` (with the zone's key) is safe to run
    /// prepared: it then finds at most one row by its primary key.
    static func single(_ names: [String]) -> Bool { names.count <= 1 }
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
