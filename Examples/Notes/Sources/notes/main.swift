import Foundation
import StratusKit

/// The app's local store: its notes and the sync engine's state, in one JSON file of the state folder.
actor NotesStore {
    struct Contents: Codable {
        var notes: [String: Record] = [:]
        var state: StratusSyncEngine.State.Serialization?
    }

    let file: URL
    private(set) var contents: Contents

    init(folder: URL) throws {
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        file = folder.appendingPathComponent("notes.json")
        contents = (try? JSONDecoder().decode(Contents.self, from: Data(contentsOf: file))) ?? Contents()
    }

    func update(_ body: (inout Contents) -> Void) throws {
        body(&contents)
        try JSONEncoder().encode(contents).write(to: file, options: .atomic)
    }
}

/// The delegate: applies what is fetched, keeps what was sent, resolves conflicts (this device's
/// text wins, on the server's version).
final class NotesSync: StratusSyncEngineDelegate {
    let store: NotesStore
    let printArrivals: Bool

    init(store: NotesStore, printArrivals: Bool) {
        self.store = store
        self.printArrivals = printArrivals
    }

    func handleEvent(_ event: StratusSyncEngine.Event, syncEngine: StratusSyncEngine) async {
        do {
            switch event {
            case .stateUpdate(let state):
                try await store.update { $0.state = state }
            case .fetchedRecordZoneChanges(let modified, let deleted):
                try await store.update { contents in
                    for record in modified { contents.notes[record.recordID.recordName] = record }
                    for id in deleted { contents.notes[id.recordName] = nil }
                }
                if printArrivals {
                    for record in modified { print("← \(record.recordID.recordName): \(record["text"]?.stringValue ?? "")") }
                    for id in deleted { print("← \(id.recordName) deleted") }
                    // At once, also when the output goes to a pipe or a file.
                    fflush(nil)
                }
            case .fetchedDatabaseChanges(_, let deletions) where !deletions.isEmpty:
                try await store.update { $0.notes = [:] }
            case .zoneReset:
                let pending = Set(syncEngine.state.pendingRecordZoneChanges.map(\.recordID.recordName))
                try await store.update { $0.notes = $0.notes.filter { pending.contains($0.key) } }
            case .sentRecordZoneChanges(let sent):
                var requeue: [PendingRecordZoneChange] = []
                try await store.update { contents in
                    for record in sent.savedRecords { contents.notes[record.recordID.recordName] = record }
                    for (record, error) in sent.failedRecordSaves {
                        if let server = error.serverRecord, var local = contents.notes[record.recordID.recordName] {
                            local.recordChangeTag = server.recordChangeTag
                            contents.notes[record.recordID.recordName] = local
                            requeue.append(.saveRecord(record.recordID))
                        } else {
                            print("! \(record.recordID.recordName): \(error)")
                        }
                    }
                }
                if !requeue.isEmpty { syncEngine.state.add(pendingRecordZoneChanges: requeue) }
            case .accountChange(let change):
                if case .signIn = change { break }
                try await store.update { $0 = NotesStore.Contents(state: $0.state) }
            default:
                break
            }
        } catch {
            print("! the store: \(error)")
        }
    }

    func nextRecordZoneChangeBatch(_ context: StratusSyncEngine.SendChangesContext, syncEngine: StratusSyncEngine) async -> StratusSyncEngine.RecordZoneChangeBatch? {
        let notes = await store.contents.notes
        return await StratusSyncEngine.RecordZoneChangeBatch(pendingChanges: context.pendingChanges) { notes[$0.recordName] }
    }
}

func setting(_ name: String) -> String {
    guard let value = ProcessInfo.processInfo.environment[name], !value.isEmpty else {
        FileHandle.standardError.write(Data("set \(name)\n".utf8))
        exit(2)
    }
    return value
}

var arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count >= 3, arguments[0] == "--state" else {
    print("usage: notes --state FOLDER add TEXT | delete ID | list | sync | watch")
    exit(2)
}
let folder = URL(fileURLWithPath: arguments[1])
arguments.removeFirst(2)
let zone = ZoneID(zoneName: "Notes")
let store = try NotesStore(folder: folder)
let anonymous = StratusContainer(serverURL: URL(string: setting("NOTES_SERVER"))!, identifier: ProcessInfo.processInfo.environment["NOTES_CONTAINER"] ?? "iCloud.dev.stratus",
                                 authentication: .apiToken(setting("NOTES_API_TOKEN"), webAuthToken: nil))
let delegate = NotesSync(store: store, printArrivals: arguments.first == "watch")
// Offline, a command still changes the notes and queues the change; the next one online sends it.
let signedIn = try? await anonymous.signIn(login: setting("NOTES_LOGIN"), password: setting("NOTES_PASSWORD"))
let container = anonymous.with(authentication: .apiToken(setting("NOTES_API_TOKEN"), webAuthToken: signedIn?.webAuthToken))
let engine = try StratusSyncEngine(.init(database: container.privateCloudDatabase, stateSerialization: await store.contents.state, delegate: delegate))
if await store.contents.state == nil { engine.state.add(pendingDatabaseChanges: [.saveZone(Zone(zoneID: zone))]) }

switch arguments.first {
case "add":
    let text = arguments.dropFirst().joined(separator: " ")
    let id = RecordID(recordName: UUID().uuidString.prefix(8).lowercased(), zoneID: zone)
    try await store.update { $0.notes[id.recordName] = Record(recordType: "Note", recordID: id, fields: ["text": .string(text)]) }
    engine.state.add(pendingRecordZoneChanges: [.saveRecord(id)])
    print("+ \(id.recordName): \(text)")
case "delete":
    guard let name = arguments.dropFirst().first else { print("delete needs an id"); exit(2) }
    try await store.update { $0.notes[name] = nil }
    engine.state.add(pendingRecordZoneChanges: [.deleteRecord(RecordID(recordName: name, zoneID: zone))])
case "list", "sync", "watch":
    break
default:
    print("unknown command \(arguments.first ?? "")")
    exit(2)
}
do {
    try await engine.sendChanges()
    try await engine.fetchChanges()
} catch {
    print("offline (\(error)); \(engine.state.pendingRecordZoneChanges.count) change(s) pending")
}
if arguments.first == "list" {
    for (name, record) in await store.contents.notes.sorted(by: { $0.key < $1.key }) { print("\(name): \(record["text"]?.stringValue ?? "")") }
}
if arguments.first == "watch" {
    print("watching; Ctrl-C stops")
    fflush(nil)
    await engine.run()
}
