import Foundation
import Logging
import StratusCore
import StratusPostgres

/// Binds the receipts a `records/modify` sends in ASSETID fields to their uploads: each must name
/// an upload of this database, zone, record and field, be used once, and either be fresh (uploaded
/// within the bind window and never bound before) or be what the field holds already (a client
/// sending a record back unchanged). The stored value is the server's own dictionary of the upload,
/// so a client cannot change an asset's size or checksum.
struct AssetBinding: Sendable {
    let assets: AssetStore
    let records: RecordStore
    let settings: AssetSettings

    private struct Use {
        var command: Int
        var field: String
        var id: UUID
        var sent: JSONValue
    }

    func bind(_ commands: [RecordStore.Command], zone: ZoneID, database: DatabaseID, logger: Logger) async throws -> [RecordStore.Command] {
        var uses: [Use] = []
        var seen = Set<UUID>()
        for (index, command) in commands.enumerated() {
            for (field, value) in command.input.fields where value.type.base == .asset {
                let sent: [JSONValue] = if case .list(_, let values) = value { values.map { FieldCoding.encode($0) } } else { [FieldCoding.encode(value)] }
                for (receipt, json) in zip(value.assetReceipts, sent) {
                    guard let receipt else {
                        throw StratusError(.badRequest, "operations[\(index)]: Field '\(field)': an asset needs the receipt its upload answered (assets/upload, then the upload URL)")
                    }
                    guard let id = AssetValue.assetID(receipt: receipt) else { throw unknown(index, field) }
                    guard seen.insert(id).inserted else {
                        throw StratusError(.badRequest, "operations[\(index)]: Field '\(field)': a receipt may be used once; this one appears more than once in the request")
                    }
                    uses.append(Use(command: index, field: field, id: id, sent: json["value"] ?? .null))
                }
            }
        }
        guard !uses.isEmpty else { return commands }
        let found = try await assets.find(uses.map(\.id), logger: logger)
        let names = Set(uses.map(\.command)).map { commands[$0].input.recordName }
        let current = try await records.lookup(names, zone: zone, in: database, logger: logger)
        let windowStart = Date().addingTimeInterval(-Double(settings.bindWindow.components.seconds))
        var values: [UUID: AssetValue] = [:]
        var assignments: [(use: Use, recordName: String)] = []
        for use in uses {
            let recordName = commands[use.command].input.recordName
            guard var asset = found[use.id], let value = asset.value else { throw unknown(use.command, use.field) }
            if asset.isUnassigned, asset.database == database {
                // A receipt of assets/rereference: it binds to the first field it is sent for (below,
                // once every check passed), under the rules of a fresh upload.
                assignments.append((use, recordName))
                asset.zoneName = zone.zoneName
                asset.recordName = recordName
                asset.fieldName = use.field
            }
            guard asset.database == database, asset.zoneName == zone.zoneName, asset.recordName == recordName, asset.fieldName == use.field else {
                throw StratusError(.badRequest, "operations[\(use.command)]: Field '\(use.field)': this receipt was issued for another record, field, zone or database; upload the asset for this field")
            }
            let held = current[ExactName(recordName)]?.fields[use.field]?.assetReceipts.contains(value.receipt) ?? false
            if !held {
                guard !asset.bound else {
                    throw StratusError(.badRequest, "operations[\(use.command)]: Field '\(use.field)': this receipt was bound already and has since been replaced; upload the asset again")
                }
                guard asset.createdAt >= windowStart else {
                    throw StratusError(.badRequest, "operations[\(use.command)]: Field '\(use.field)': this receipt has expired; upload the asset again")
                }
            }
            if let size = use.sent["size"], size != .int(value.size) {
                throw StratusError(.badRequest, "operations[\(use.command)]: Field '\(use.field)': size does not match the upload")
            }
            if let checksum = use.sent["fileChecksum"], checksum != .string(value.fileChecksum) {
                throw StratusError(.badRequest, "operations[\(use.command)]: Field '\(use.field)': fileChecksum does not match the upload")
            }
            values[use.id] = value
        }
        for (use, recordName) in assignments {
            guard try await assets.assign(use.id, zoneName: zone.zoneName, recordName: recordName, fieldName: use.field, logger: logger) else {
                throw StratusError(.badRequest, "operations[\(use.command)]: Field '\(use.field)': this receipt was issued for another record, field, zone or database; upload the asset for this field")
            }
        }
        var bound = commands
        for index in Set(uses.map(\.command)) {
            for (field, value) in bound[index].input.fields where value.type.base == .asset {
                func canonical(_ value: FieldValue) -> FieldValue {
                    guard case .asset(let json) = value, let receipt = json["receipt"]?.stringValue, let id = AssetValue.assetID(receipt: receipt),
                          let stored = values[id] else { return value }
                    return .asset(stored.json)
                }
                if case .list(let base, let elements) = value {
                    bound[index].input.fields[field] = .list(base, elements.map(canonical))
                } else {
                    bound[index].input.fields[field] = canonical(value)
                }
            }
        }
        return bound
    }

    /// Marks the assets the saved records hold as bound (best effort: stratus-gc marks them from the
    /// events anyway).
    func saved(_ records: [Record], logger: Logger) async {
        let ids = records.flatMap(\.assetIDs)
        guard !ids.isEmpty else { return }
        do {
            try await assets.markBound(ids, logger: logger)
        } catch {
            logger.warning("marking assets bound failed; stratus-gc will", metadata: ["error": "\(error)"])
        }
    }

    private func unknown(_ index: Int, _ field: String) -> StratusError {
        StratusError(.badRequest, "operations[\(index)]: Field '\(field)': unknown receipt; send the receipt an upload answered")
    }
}
