import Foundation
import StratusCore

extension BenchSuite {
    /// The bodies of `hostile.cpu`: about this many bytes each, under the API's request limit
    /// (`STRATUS_MAX_REQUEST_BYTES`, 10 MiB by default).
    static let hostileBodyBytes = 9_000_000

    /// One hostile body: its name (`hostile.cpu.<name>`), what it is, the operation it is sent to,
    /// and its bytes.
    struct HostileBody {
        var name: String
        var what: String
        var operation: String
        var bytes: [UInt8]
    }

    /// The worst bodies the suite knows how to build, each about `size` bytes: long lists of every
    /// field type in one record (over the record limit, so refused), many fields, objects nested to
    /// the reader's depth, huge numbers, long and escaped strings, a query's list value, and 200
    /// operations of records under the limit (stored, replacing the previous round's).
    static func hostileBodies(zone: String, size: Int) -> [HostileBody] {
        /// A records/modify of one record whose fields' text `fields` writes into the body.
        func record(_ fields: (inout [UInt8], Int) -> Void) -> [UInt8] {
            var body = Array(#"{"zoneID":{"zoneName":"\#(zone)"},"operations":[{"operationType":"create","record":{"recordName":"hostile","recordType":"Hostile","fields":{"#.utf8)
            body.reserveCapacity(size + 256)
            fields(&body, size - body.count - 8)
            body += "}}}]}".utf8
            return body
        }
        /// One field of `type` whose list repeats `element` to fill `room` bytes.
        func list(_ type: String, _ element: String) -> [UInt8] {
            record { body, room in
                body += #""f":{"type":"\#(type)","value":["#.utf8
                let element = Array(element.utf8)
                let end = body.count + room - 32
                var first = true
                while body.count + element.count + 1 < end {
                    if !first { body.append(UInt8(ascii: ",")) }
                    first = false
                    body += element
                }
                body += "]}".utf8
            }
        }
        var bodies: [HostileBody] = [
            HostileBody(name: "int64-list", what: "INT64_LIST of ones", operation: "records/modify", bytes: list("INT64_LIST", "1")),
            HostileBody(name: "int64-list-wide", what: "INT64_LIST of 19-digit integers", operation: "records/modify",
                        bytes: list("INT64_LIST", "-9223372036854775807")),
            HostileBody(name: "double-list", what: "DOUBLE_LIST of 1.25", operation: "records/modify", bytes: list("DOUBLE_LIST", "1.25")),
            HostileBody(name: "double-list-huge", what: "DOUBLE_LIST of the largest doubles, and integers beyond 64 bits", operation: "records/modify",
                        bytes: list("DOUBLE_LIST", "1.7976931348623157e308,123456789012345678901234567890")),
            HostileBody(name: "timestamp-list", what: "TIMESTAMP_LIST", operation: "records/modify", bytes: list("TIMESTAMP_LIST", "1700000000000")),
            HostileBody(name: "string-list", what: "STRING_LIST of one-letter strings", operation: "records/modify", bytes: list("STRING_LIST", #""a""#)),
            HostileBody(name: "string-list-escaped", what: "STRING_LIST of escaped strings", operation: "records/modify",
                        bytes: list("STRING_LIST", #""\u00e9\n\"""#)),
            HostileBody(name: "bytes-list", what: "BYTES_LIST of short base64", operation: "records/modify", bytes: list("BYTES_LIST", #""AAAA""#)),
            HostileBody(name: "reference-list", what: "REFERENCE_LIST", operation: "records/modify",
                        bytes: list("REFERENCE_LIST", #"{"recordName":"r1","action":"NONE"}"#)),
            HostileBody(name: "location-list", what: "LOCATION_LIST", operation: "records/modify",
                        bytes: list("LOCATION_LIST", #"{"latitude":1.5,"longitude":2.5}"#)),
            HostileBody(name: "asset-list", what: "ASSETID_LIST", operation: "records/modify",
                        bytes: list("ASSETID_LIST", #"{"fileChecksum":"abc","size":1,"receipt":"x"}"#)),
            HostileBody(name: "long-string", what: "one STRING field as long as the body", operation: "records/modify", bytes: record { body, room in
                body += #""s":{"value":""#.utf8
                body += repeatElement(UInt8(ascii: "a"), count: room - 32)
                body += #""}"#.utf8
            }),
            HostileBody(name: "many-fields", what: "one record of as many INT64 fields as fit", operation: "records/modify", bytes: record { body, room in
                let end = body.count + room - 32
                var index = 0
                while body.count + 40 < end {
                    if index > 0 { body.append(UInt8(ascii: ",")) }
                    body += #""f\#(index)":{"value":\#(index)}"#.utf8
                    index += 1
                }
            }),
            HostileBody(name: "deep-objects", what: "fields whose values are objects nested 500 deep", operation: "records/modify", bytes: record { body, room in
                let depth = 500
                let nested = Array((String(repeating: #"{"a":"#, count: depth) + "1" + String(repeating: "}", count: depth)).utf8)
                let end = body.count + room - 32
                var index = 0
                while body.count + nested.count + 40 < end {
                    if index > 0 { body.append(UInt8(ascii: ",")) }
                    body += #""d\#(index)":{"type":"ASSETID","value":"#.utf8
                    body += nested
                    body.append(UInt8(ascii: "}"))
                    index += 1
                }
            }),
        ]
        // 200 operations (the API's most) of records under the record limit: stored.
        var operations = Array(#"{"zoneID":{"zoneName":"\#(zone)"},"atomic":false,"operations":["#.utf8)
        let perRecord = (size - operations.count) / 200 - 160
        for index in 0..<200 {
            if index > 0 { operations.append(UInt8(ascii: ",")) }
            operations += #"{"operationType":"forceReplace","record":{"recordName":"hostile-\#(index)","recordType":"Hostile","fields":{"f":{"type":"INT64_LIST","value":[1"#.utf8
            operations += repeatElement(contentsOf: ",1", count: max(0, perRecord / 2))
            operations += "]}}}}".utf8
        }
        operations += "]}".utf8
        bodies.append(HostileBody(name: "many-operations", what: "200 forceReplaces of INT64_LISTs under the record limit", operation: "records/modify", bytes: operations))
        // A query whose one filter carries a list as long as the body.
        var query = Array(#"{"zoneID":{"zoneName":"\#(zone)"},"query":{"recordType":"Hostile","filterBy":[{"fieldName":"f","comparator":"IN","fieldValue":{"type":"INT64_LIST","value":[1"#.utf8)
        query += repeatElement(contentsOf: ",1", count: (size - query.count - 64) / 2)
        query += "]}}]}}".utf8
        bodies.append(HostileBody(name: "query-list", what: "records/query IN with a list as long as the body", operation: "records/query", bytes: query))
        return bodies
    }

    /// `hostile.cpu`: each hostile body sent `rounds` times, one at a time; the API's CPU over
    /// them in milliseconds per megabyte (10^6 bytes) of body (`apiCpuMsPerMB`; the goal: at most 100). Every answer must be a CloudKit answer (a 200 or an
    /// error with `serverErrorCode`); a 5xx, a body that is not JSON or a timeout is an error.
    /// Ends with `hostile.cpu`, the worst body's figure.
    func hostile(_ client: CloudKitClient, rounds: Int = 1) async throws -> [ScenarioResult] {
        let zone = zone("Hostile")
        try await client.createZone(zone)
        var results: [ScenarioResult] = []
        var worst: (name: String, perMB: Double)?
        for body in Self.hostileBodies(zone: zone, size: Self.hostileBodyBytes) {
            try await settle(client)
            let load = await closedLoop(concurrency: 1, duration: .seconds(600), limit: rounds, state: { $0 }) { _, _ in
                let (status, reply) = try await client.postBytes(body.operation, body.bytes)
                let code = CloudKitClient.errorCode(of: reply)
                guard status < 500, status == 200 || code != nil else { return .failed("HTTP \(status) \(code ?? "no CloudKit error")") }
                return .done(counter: "HTTP \(status) \(code ?? "")")
            }
            let megabytes = Double(body.bytes.count * rounds) / 1_000_000
            let apiMilliseconds = (load.cpu?.first { $0.name == "stratus-api" }?.cpuSeconds ?? .nan) * 1000
            let perMB = apiMilliseconds / megabytes
            if perMB.isFinite, perMB > worst?.perMB ?? -1 { worst = (body.name, perMB) }
            let answers = load.counters.keys.sorted()
            progress("hostile.cpu.\(body.name): answered " + answers.joined(separator: ", "))
            results.append(ScenarioResult(
                name: "hostile.cpu.\(body.name)", operation: "\(body.operation): \(body.what), \(body.bytes.count) bytes", concurrency: 1, load: load,
                figures: ["bodyMB": Double(body.bytes.count) / 1_000_000, "apiCpuMsPerMB": perMB,
                          "httpStatus": Double(answers.last.flatMap { Int($0.split(separator: " ")[1]) } ?? 0)]))
        }
        if let worst {
            results.append(ScenarioResult(
                name: "hostile.cpu", operation: "the worst hostile body: \(worst.name)", concurrency: 1, load: LoadOutcome(),
                figures: ["apiCpuMsPerMB": worst.perMB]))
        }
        return results
    }
}

/// `text`'s UTF-8 `count` times, for `+=` on a byte array.
private func repeatElement(contentsOf text: String, count: Int) -> [UInt8] {
    let unit = Array(text.utf8)
    var bytes: [UInt8] = []
    bytes.reserveCapacity(unit.count * count)
    for _ in 0..<count { bytes += unit }
    return bytes
}
