import Foundation
import Hummingbird
import Logging
import StratusCore
import StratusPostgres

/// What the console's data pages read and write, through the same stores the API uses.
struct ConsoleData: Sendable {
    let store: PostgresStore
    let limits: APILimits
    let secretKey: SecretKey
    let assetSettings: AssetSettings
    /// The process's cache of API-token answers, if it keeps one: a console change to a container's
    /// access empties it at once (`ConsoleAccessPage.change`).
    var accessCache: AccessCache? = nil

    var zones: ZoneStore { ZoneStore(store: store) }
    var records: RecordStore { RecordStore(store: store) }
    var assets: AssetBinding { AssetBinding(assets: AssetStore(store: store), records: records, settings: assetSettings) }

    /// Records a page lists, zones and query results a page shows.
    static let pageSize = 50
    static let maxZones = 200
}

/// A database the console looks at, named by the query items (or form fields) `container`,
/// `environment`, `database` (`public`, `private` or `shared`), `user` (the owner of a private
/// database, the participant of a shared one) and, in a shared database, `owner` (the owner of the
/// zone shared with the user).
struct ConsoleDatabase: Sendable {
    /// The database looked at, as the API's calls address it.
    let target: CallTarget
    var database: DatabaseID { target.addressed }
    /// In a shared database: the owner of the zone looked at (nil on the list of shared zones).
    private(set) var zoneOwner: String?

    /// A container named by a page or form, checked as the API checks names, that the operator may reach.
    static func container(_ name: String?, session: ConsoleSession) throws(StratusError) -> String {
        guard let container = name, !container.isEmpty, container.utf8.count <= 255 else {
            throw StratusError(.badRequest, "Name a container")
        }
        try ClientText.check(container, "The container")
        guard session.operator.mayReach(container) else { throw StratusError(.accessDenied, "You may not reach container '\(container)'") }
        return container
    }

    init(_ items: [String: String], session: ConsoleSession) throws(StratusError) {
        let container = try Self.container(items["container"], session: session)
        let database: DatabaseID
        guard let environment = Environment(rawValue: items["environment"] ?? "") else {
            throw StratusError(.badRequest, "The environment is development or production")
        }
        switch items["database"] ?? "" {
        case "public":
            database = DatabaseID(container: container, environment: environment, scope: .public, owner: DatabaseID.publicOwner)
        case "private":
            let user = (items["user"] ?? "").trimmingCharacters(in: .whitespaces)
            guard !user.isEmpty else { throw StratusError(.badRequest, "A private database needs the user record name of its owner") }
            try Record.validate(recordName: user, "The user record name")
            database = DatabaseID(container: container, environment: environment, scope: .private, owner: user)
        case "shared":
            let user = (items["user"] ?? "").trimmingCharacters(in: .whitespaces)
            guard !user.isEmpty else { throw StratusError(.badRequest, "A shared database needs the user record name of the user it is shared with") }
            try Record.validate(recordName: user, "The user record name")
            database = DatabaseID(container: container, environment: environment, scope: .shared, owner: user)
            if let owner = items["owner"]?.trimmingCharacters(in: .whitespaces), !owner.isEmpty {
                try Record.validate(recordName: owner, "The zone's owner")
                zoneOwner = owner
            }
        default:
            throw StratusError(.badRequest, "The database is public, private or shared")
        }
        target = CallTarget(addressed: database)
    }

    /// Whether this is a user's shared database, which the console shows read-only.
    var isShared: Bool { target.participant != nil }

    /// Refuses a change to a shared database: the console shows it read-only.
    func requireWritable() throws(StratusError) {
        guard !isShared else {
            throw StratusError(.accessDenied, "The console shows a user's shared database read-only; change the records in their owner's private database")
        }
    }

    /// The same database looking at a zone of `owner` (in a shared database).
    func owned(by owner: String) -> ConsoleDatabase {
        var copy = self
        copy.zoneOwner = owner
        return copy
    }

    /// Where the zone looked at lives: for a shared database, the private database of the zone's owner.
    var storage: DatabaseID { target.database(ofZoneOwner: zoneOwner) }

    /// The query items that name this database again.
    var items: [(String, String)] {
        var items = [("container", database.container), ("environment", database.environment.rawValue), ("database", database.scope.rawValue)]
        if let user = target.user { items.append(("user", user)) }
        if let zoneOwner { items.append(("owner", zoneOwner)) }
        return items
    }

    /// A console URL for this database with more query items.
    func link(_ path: String, _ more: [(String, String)] = []) -> String {
        path + "?" + (items + more).map { "\($0.0)=\(ConsolePage.escape($0.1))" }.joined(separator: "&")
    }

    /// The database as an audit entry's details name it (the container is the entry's own field).
    var auditDetails: [(String, String)] { Array(items.dropFirst()) }

    /// The hidden form fields that name this database.
    var hidden: [[String: String]] { items.map { ["name": $0.0, "value": $0.1] } }

    /// What the page headings call it.
    var label: String {
        let name = if let participant = target.participant {
            "shared with \(participant)" + (zoneOwner.map { " · zone of \($0)" } ?? "")
        } else if let user = target.user {
            "private of \(user)"
        } else {
            "public"
        }
        return "\(database.container) · \(database.environment.rawValue) · " + name
    }

    /// Who writes as the operator: the owner in a private database; in the public database, where a
    /// record belongs to its creator, the creator of the record changed (nil for a new one: the server).
    func actingUser(for existing: Record?) -> String? {
        target.belongsToUser ? database.owner : existing?.created.userRecordName
    }
}

/// The data pages: container → environment → database → zone → records, a record, a query.
struct ConsoleDataPages<Context: StratusRequestContext>: Sendable {
    let routes: ConsoleRoutes<Context>
    var data: ConsoleData { routes.data }

    func register(on router: Router<Context>) {
        router.get("/console/containers/:container") { request, context in await routes.page(request, context) { try await container(request, context) } }
        router.get("/console/zones") { request, context in await routes.page(request, context) { try await zones(request, context) } }
        router.post("/console/zones") { request, context in await routes.page(request, context) { try await createZone(request, context) } }
        router.get("/console/records") { request, context in await routes.page(request, context) { try await records(request, context) } }
        router.get("/console/record") { request, context in await routes.page(request, context) { try await record(request, context) } }
        router.post("/console/record/save") { request, context in await routes.page(request, context) { try await save(request, context) } }
        router.post("/console/record/delete") { request, context in await routes.page(request, context) { try await delete(request, context) } }
        router.get("/console/query") { request, context in await routes.page(request, context) { try await query(request, context) } }
    }

    static func items(_ request: Request) -> [String: String] {
        var items: [String: String] = [:]
        for (name, value) in request.uri.queryParameters { items[String(name)] = String(value) }
        return items
    }

    /// What a finished form's redirect says on the next page (fixed texts: nothing from the URL is shown as a notice).
    static func notice(_ items: [String: String]) -> String? {
        switch items["done"] {
        case "zone": "The zone was created."
        case "saved": "The record was saved."
        case "deleted": "The record was deleted."
        default: nil
        }
    }

    func crumbs(_ database: ConsoleDatabase, zone: String? = nil) -> [(label: String, href: String)] {
        var crumbs: [(label: String, href: String)] = [
            ("Containers", "/console"),
            (database.database.container, "/console/containers/\(ConsolePage.escape(database.database.container))"),
            (database.label, database.link("/console/zones")),
        ]
        if let zone { crumbs.append((zone, database.link("/console/records", [("zone", zone)]))) }
        return crumbs
    }

    /// The zone named by `name`, checked as the API checks it.
    static func zone(_ name: String?, database: ConsoleDatabase) throws(StratusError) -> ZoneID {
        let zoneName = (name ?? "").isEmpty ? ZoneID.defaultZoneName : name!
        if zoneName != ZoneID.defaultZoneName { try ZoneID.validate(zoneName: zoneName) }
        return ZoneID(zoneName: zoneName, ownerRecordName: database.storage.owner)
    }

    /// Records of the zone by exact name: in a shared database only those the user reaches (a zone
    /// not shared with them is ZONE_NOT_FOUND), through the shared database's own read.
    func lookup(_ names: [String], zone: ZoneID, database: ConsoleDatabase, logger: Logger) async throws -> [ExactName: Record] {
        guard let participant = database.target.participant else {
            return try await data.records.lookup(names, zone: zone, in: database.database, logger: logger)
        }
        return try await ShareStore(store: data.store).lookup(
            names, zoneName: zone.zoneName, owner: zone.ownerRecordName, user: participant, container: database.database.container,
            environment: database.database.environment, logger: logger)
    }

    // MARK: Container and zones

    func container(_ request: Request, _ context: Context) async throws -> Response {
        let session = try await routes.session(request, context)
        let container = try ConsoleDatabase.container(context.parameters.get("container"), session: session)
        guard try await ContainerStore(store: data.store).exists(container: container, logger: context.logger) else {
            throw StratusError(.notFound, "No container '\(container)'")
        }
        var values = try await ConsoleTenancy(routes: routes).values(container, logger: context.logger)
        values["container"] = container
        values["containerQuery"] = ConsolePage.escape(container)
        values["environments"] = Environment.allCases.map { ["name": $0.rawValue] }
        if let notice = ConsoleTenancy<Context>.notice(Self.items(request)["done"]) { values["notice"] = notice }
        return ConsolePage.render("container", title: container, session: session, crumbs: [("Containers", "/console")], values)
    }

    func zones(_ request: Request, _ context: Context) async throws -> Response {
        let session = try await routes.session(request, context)
        let items = Self.items(request)
        let database = try ConsoleDatabase(items, session: session)
        if database.isShared { return try await sharedZones(database, session: session, context: context) }
        let zones = try await data.zones.list(in: database.database, logger: context.logger)
        let names = [ZoneID.defaultZoneName] + zones.map(\.zoneID.zoneName).filter { $0 != ZoneID.defaultZoneName }
        let subscriptions = database.target.belongsToUser
            ? database.link("/console/subscriptions").replacingOccurrences(of: "&database=private", with: "") : nil
        return ConsolePage.render("zones", title: "Zones", session: session, crumbs: Array(crumbs(database).dropLast()), [
            "subscriptionsLink": subscriptions as Any,
            "database": database.label, "notice": Self.notice(items) as Any, "hidden": database.hidden,
            "zones": names.prefix(ConsoleData.maxZones).map { ["name": $0, "href": database.link("/console/records", [("zone", $0)])] },
            "more": names.count > ConsoleData.maxZones, "shown": ConsoleData.maxZones,
        ])
    }

    /// A user's shared database: the zones of other users shared with them (shares they accepted).
    func sharedZones(_ database: ConsoleDatabase, session: ConsoleSession, context: Context) async throws -> Response {
        let shared = try await ShareStore(store: data.store).sharedZones(
            user: database.database.owner, container: database.database.container, environment: database.database.environment, logger: context.logger)
        let zones = shared.prefix(ConsoleData.maxZones).map { zone -> [String: Any] in
            let id = zone.zone.zoneID
            let access = zone.zoneWide.map { "the whole zone, \($0.rawValue)" }
                ?? zone.roots.sorted { $0.key < $1.key }.map { "\($0.key) (\($0.value.rawValue))" }.joined(separator: ", ")
            return ["name": id.zoneName, "owner": id.ownerRecordName, "access": access,
                    "href": database.owned(by: id.ownerRecordName).link("/console/records", [("zone", id.zoneName)])]
        }
        return ConsolePage.render("zones", title: "Shared zones", session: session, crumbs: Array(crumbs(database).dropLast()), [
            "database": database.label, "shared": true, "zones": zones, "more": shared.count > ConsoleData.maxZones, "shown": ConsoleData.maxZones,
        ])
    }

    func createZone(_ request: Request, _ context: Context) async throws -> Response {
        let (session, form) = try await routes.form(request, context)
        let database = try ConsoleDatabase(form.fields, session: session)
        try database.requireWritable()
        let zoneName = try form.required("zoneName", label: "The zone name")
        try ZoneID.validate(zoneName: zoneName)
        let causation = Causation(requestID: context.requestID, userRecordName: database.actingUser(for: nil))
        let outcomes = try await data.zones.modify(
            [.create(ZoneID(zoneName: zoneName, ownerRecordName: database.database.owner))], in: database.database, causation: causation, logger: context.logger)
        if case .failure(let error) = outcomes.first { throw error }
        context.logger.info("console zone created", metadata: ["operator": "\(session.operator.login)", "zone": "\(zoneName)"])
        try await routes.audit(.zoneCreate, session: session, context, container: database.database.container, subject: zoneName, details: database.auditDetails)
        return ConsolePage.redirect(database.link("/console/records", [("zone", zoneName), ("done", "zone")]))
    }

    // MARK: Records

    /// What a zone's page starts from: the session, the query items, and the database and zone they name.
    func opened(_ request: Request, _ context: Context) async throws -> (ConsoleSession, [String: String], ConsoleDatabase, ZoneID) {
        let session = try await routes.session(request, context)
        let items = Self.items(request)
        let database = try ConsoleDatabase(items, session: session)
        if database.isShared, database.zoneOwner == nil { throw StratusError(.badRequest, "Name the owner of the shared zone") }
        return (session, items, database, try Self.zone(items["zone"], database: database))
    }

    /// A record as the pages show it: system fields, and every field with its type and its value as the API writes it.
    func view(_ record: Record, zone: ZoneID, request: Request) -> [String: Any] {
        let links = AssetLinks(request: request, key: data.secretKey, settings: data.assetSettings)
        let wire = RecordWire.dictionary(record, zone: zone, desiredKeys: nil, numbersAsStrings: false, links: links)
        var fields: [String: JSONValue] = [:]
        if case .object(let members) = wire, case .object(let encoded)? = members["fields"] { fields = encoded }
        let rows = record.fields.keys.sorted().map { name -> [String: Any] in
            let value: JSONValue = if case .object(let field)? = fields[name], let value = field["value"] { value } else { .null }
            return ["name": name, "type": record.fields[name]!.type.rawValue, "value": Self.text(value)]
        }
        return [
            "recordName": record.recordName, "recordType": record.recordType, "changeTag": record.changeTag,
            "created": Self.time(record.created.timestamp) + " by " + record.created.userRecordName,
            "modified": Self.time(record.modified.timestamp) + " by " + record.modified.userRecordName,
            "expiration": record.expirationDate.map(Self.time) as Any,
            "fields": rows, "fieldCount": rows.count,
            "fieldsJSON": Self.text(.object(fields), pretty: true),
        ]
    }

    static func text(_ value: JSONValue, pretty: Bool = false) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = pretty ? [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? ""
    }

    static func time(_ milliseconds: Int64) -> String {
        ISO8601DateFormatter().string(from: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
    }

    func records(_ request: Request, _ context: Context) async throws -> Response {
        let (session, items, database, zone) = try await opened(request, context)
        if let name = items["lookup"]?.trimmingCharacters(in: .whitespaces), !name.isEmpty {
            try Record.validate(recordName: name)
            return ConsolePage.redirect(database.link("/console/record", [("zone", zone.zoneName), ("record", name)]))
        }
        let after = items["after"].flatMap { $0.isEmpty ? nil : String($0.prefix(255)) }
        let names = try await ConsoleBrowse(store: data.store).recordNames(
            zone: zone, in: database.storage, after: after, limit: ConsoleData.pageSize, logger: context.logger)
        let found = try await lookup(names, zone: zone, database: database, logger: context.logger)
        let rows = names.compactMap { found[ExactName($0)] }.map { record -> [String: Any] in
            var row = view(record, zone: zone, request: request)
            row["href"] = database.link("/console/record", [("zone", zone.zoneName), ("record", record.recordName)])
            return row
        }
        return ConsolePage.render("records", title: zone.zoneName, session: session, crumbs: crumbs(database), [
            "database": database.label, "zone": zone.zoneName, "notice": Self.notice(items) as Any, "hidden": database.hidden,
            "rows": rows, "empty": rows.isEmpty, "pageSize": ConsoleData.pageSize,
            "next": names.count == ConsoleData.pageSize ? database.link("/console/records", [("zone", zone.zoneName), ("after", names.last!)]) as Any : nil as Any?,
            "first": after == nil ? nil as Any? : database.link("/console/records", [("zone", zone.zoneName)]),
            "queryAction": "/console/query", "shared": database.isShared,
        ])
    }

    func record(_ request: Request, _ context: Context) async throws -> Response {
        let (session, items, database, zone) = try await opened(request, context)
        let name = items["record"] ?? ""
        try Record.validate(recordName: name)
        guard let record = try await lookup([name], zone: zone, database: database, logger: context.logger)[ExactName(name)] else {
            throw StratusError(.notFound, "Record '\(name)' does not exist in zone '\(zone.zoneName)'")
        }
        var values = view(record, zone: zone, request: request)
        values["zone"] = zone.zoneName
        values["hidden"] = database.hidden
        values["notice"] = Self.notice(items) as Any
        values["shared"] = database.isShared
        return ConsolePage.render("record", title: record.recordName, session: session, crumbs: crumbs(database, zone: zone.zoneName), values)
    }

    /// Saves (creates, or updates with the change tag last seen) a record through the API's write path.
    func save(_ request: Request, _ context: Context) async throws -> Response {
        let (session, form) = try await routes.form(request, context)
        let database = try ConsoleDatabase(form.fields, session: session)
        try database.requireWritable()
        let zone = try Self.zone(form["zone"], database: database)
        let recordType = try form.required("recordType", label: "The record type")
        let fieldsText = (form["fields"] ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        let fields: JSONValue
        do {
            fields = fieldsText.isEmpty ? .object([:]) : try JSONDecoder().decode(JSONValue.self, from: Data(fieldsText.utf8))
        } catch {
            throw StratusError(.badRequest, "The fields are not valid JSON: write a dictionary like {\"title\": {\"value\": \"Hello\"}}")
        }
        guard case .object = fields else { throw StratusError(.badRequest, "The fields must be a JSON dictionary of field name to {\"value\": …}") }
        let changeTag = form["changeTag"].flatMap { $0.isEmpty ? nil : $0 }
        let recordName = form["recordName"].map { $0.trimmingCharacters(in: .whitespaces) }.flatMap { $0.isEmpty ? nil : $0 }
        let operation: RecordOperationType = changeTag == nil ? .create : .update
        var wire: [String: JSONValue] = ["recordType": .string(recordType), "fields": fields]
        if let recordName { wire["recordName"] = .string(recordName) }
        if let changeTag { wire["recordChangeTag"] = .string(changeTag) }
        let input = try RecordWire.input(
            try RequestBody.decode(WireRecordInput.self, from: EventCoding.encode(JSONValue.object(wire))), operation: operation, zone: zone)
        let existing = operation == .update
            ? try await data.records.lookup([input.recordName], zone: zone, in: database.database, logger: context.logger)[ExactName(input.recordName)]
            : nil
        let saved = try await write(RecordStore.Command(type: operation, input: input), zone: zone, database: database, existing: existing, context: context)
        context.logger.info("console record saved", metadata: ["operator": "\(session.operator.login)", "record": "\(saved)"])
        try await routes.audit(
            .recordSave, session: session, context, container: database.database.container, subject: saved,
            details: database.auditDetails + [("zone", zone.zoneName), ("operation", operation == .create ? "create" : "update")])
        return ConsolePage.redirect(database.link("/console/record", [("zone", zone.zoneName), ("record", saved), ("done", "saved")]))
    }

    func delete(_ request: Request, _ context: Context) async throws -> Response {
        let (session, form) = try await routes.form(request, context)
        let database = try ConsoleDatabase(form.fields, session: session)
        try database.requireWritable()
        let zone = try Self.zone(form["zone"], database: database)
        let name = try form.required("recordName", label: "The record name")
        try Record.validate(recordName: name)
        let existing = try await data.records.lookup([name], zone: zone, in: database.database, logger: context.logger)[ExactName(name)]
        guard let existing else { throw StratusError(.notFound, "Record '\(name)' does not exist in zone '\(zone.zoneName)'") }
        var input = RecordInput(recordName: name)
        // With the change tag the page showed, a delete that raced another write is refused (CONFLICT).
        input.changeTag = form["changeTag"].flatMap { $0.isEmpty ? nil : $0 }
        _ = try await write(RecordStore.Command(type: input.changeTag == nil ? .forceDelete : .delete, input: input), zone: zone, database: database, existing: existing, context: context)
        context.logger.info("console record deleted", metadata: ["operator": "\(session.operator.login)", "record": "\(name)"])
        try await routes.audit(
            .recordDelete, session: session, context, container: database.database.container, subject: name,
            details: database.auditDetails + [("zone", zone.zoneName)])
        return ConsolePage.redirect(database.link("/console/records", [("zone", zone.zoneName), ("done", "deleted")]))
    }

    /// One command through `records/modify`'s path: asset binding, `RecordStore.modify` (events, sync
    /// and subscriptions see it), the asset bookkeeping after; returns the record's name.
    func write(_ command: RecordStore.Command, zone: ZoneID, database: ConsoleDatabase, existing: Record?, context: Context) async throws -> String {
        let commands = try await data.assets.bind([command], zone: zone, database: database.database, logger: context.logger)
        var limits = RecordStore.Limits()
        limits.maxRecordBytes = data.limits.maxRecordBytes
        limits.maxEventBytes = data.limits.maxEventBytes
        limits.userQuotaBytes = data.limits.userQuotaBytes
        let causation = Causation(requestID: context.requestID, userRecordName: database.actingUser(for: existing))
        let outcomes = try await data.records.modify(
            commands, zone: zone, in: database.database, atomic: !zone.isDefaultZone, causation: causation, deviceID: nil, limits: limits,
            logger: context.logger)
        await data.assets.saved(outcomes.compactMap { if case .success(.saved(let record)) = $0 { record } else { nil } }, logger: context.logger)
        switch outcomes.first {
        case .success(.saved(let record))?: return record.recordName
        case .success(.deleted(let name))?: return name
        case .failure(let failure)?: throw failure.error
        case nil: throw StratusError(.internalError, "no outcome for the write")
        }
    }

    // MARK: Query

    /// The comparators the query form offers.
    static var comparators: [String] { ["EQUALS", "NOT_EQUALS", "LESS_THAN", "LESS_THAN_OR_EQUALS", "GREATER_THAN", "GREATER_THAN_OR_EQUALS", "BEGINS_WITH"] }

    /// Runs `records/query`'s parser and store on the form's one filter and one sort.
    func query(_ request: Request, _ context: Context) async throws -> Response {
        let (session, items, database, zone) = try await opened(request, context)
        guard !database.isShared else { throw StratusError(.badRequest, "The console queries public and private databases; browse a shared zone's records instead") }
        let recordType = items["recordType"] ?? ""
        var values: [String: Any] = [
            "database": database.label, "zone": zone.zoneName, "hidden": database.hidden, "recordType": recordType,
            "field": items["field"] ?? "", "value": items["value"] ?? "", "sort": items["sort"] ?? "",
            "comparators": Self.comparators.map { ["name": $0, "selected": $0 == (items["comparator"] ?? "EQUALS")] },
            "valueTypes": ["STRING", "INT64", "DOUBLE"].map { ["name": $0, "selected": $0 == (items["valueType"] ?? "STRING")] },
            "descending": items["order"] == "descending",
        ]
        if !recordType.isEmpty {
            var query: [String: JSONValue] = ["recordType": .string(recordType)]
            if let field = items["field"], !field.isEmpty {
                let comparator = items["comparator"] ?? "EQUALS"
                guard Self.comparators.contains(comparator) else { throw StratusError(.badRequest, "Unknown comparator '\(comparator.prefix(64))'") }
                let text = items["value"] ?? ""
                let value: JSONValue
                switch items["valueType"] ?? "STRING" {
                case "INT64":
                    guard let number = Int64(text) else { throw StratusError(.badRequest, "'\(text.prefix(64))' is not a whole number") }
                    value = .object(["value": .int(number), "type": .string("INT64")])
                case "DOUBLE":
                    guard let number = Double(text), number.isFinite else { throw StratusError(.badRequest, "'\(text.prefix(64))' is not a number") }
                    value = .object(["value": .double(number), "type": .string("DOUBLE")])
                default:
                    value = .object(["value": .string(text), "type": .string("STRING")])
                }
                query["filterBy"] = .array([.object(["fieldName": .string(field), "comparator": .string(comparator), "fieldValue": value])])
            }
            if let sort = items["sort"], !sort.isEmpty {
                query["sortBy"] = .array([.object(["fieldName": .string(sort), "ascending": .bool(items["order"] != "descending")])])
            }
            let parsed = try RecordQuery.parse(.object(query), limits: data.limits.query)
            try IndexPolicy.development.check(parsed)
            let page = try await QueryStore(store: data.store).run(
                parsed, in: database.database, scope: .zone(zone.zoneName), limit: ConsoleData.pageSize, after: nil, logger: context.logger)
            values["ran"] = true
            values["rows"] = try page.records.map { zoneName, record -> [String: Any] in
                var row = view(record, zone: ZoneID(zoneName: zoneName, ownerRecordName: database.database.owner), request: request)
                row["href"] = database.link("/console/record", [("zone", zoneName), ("record", record.recordName)])
                return row
            }
            values["count"] = page.rows.count
            values["more"] = page.continuation != nil
            values["pageSize"] = ConsoleData.pageSize
        }
        return ConsolePage.render("query", title: "Query", session: session, crumbs: crumbs(database, zone: zone.zoneName), values)
    }
}
