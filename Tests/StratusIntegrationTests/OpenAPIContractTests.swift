import Foundation
import Hummingbird
import HummingbirdTesting
import StratusAPI
import StratusCore
import StratusPostgres
import StratusTesting
import XCTest

/// The OpenAPI document (docs/openapi.json, written by scripts/openapi.py) cannot drift from the
/// API: the router and the document name the same paths and methods, `GET /openapi.json` serves
/// the document byte for byte, and the document holds together as OpenAPI 3.1 (every reference
/// resolves, every path parameter is declared, every error answer is CloudKit's error dictionary).
/// scripts/openapi.py --check validates it with a full OpenAPI 3.1 validator as well, and
/// scripts/fuzz.sh checks a live server's answers against it.
final class OpenAPIContractTests: XCTestCase {
    static let methods = ["get", "put", "post", "delete", "options", "head", "patch", "trace"]

    static var documentURL: URL { TestSupport.repositoryRoot.appendingPathComponent("docs/openapi.json") }

    static func document() throws -> [String: Any] {
        let object = try JSONSerialization.jsonObject(with: Data(contentsOf: documentURL))
        return try XCTUnwrap(object as? [String: Any], "docs/openapi.json is not a JSON object")
    }

    /// A router built as stratus-api builds it; nothing connects to the database.
    static func router() throws -> Router<APIRequestContext> {
        let store = try PostgresStore(url: "postgres://stratus@127.0.0.1:9/unused", logger: TestSupport.logger)
        return buildRouter(APIDependencies(store: store, readiness: [], metrics: { "" }), configuration: APIConfiguration(secretKey: SecretKey.generate()))
    }

    /// `METHOD /path/{parameter}` of every operation the document describes.
    static func documentedOperations(_ document: [String: Any]) throws -> Set<String> {
        let paths = try XCTUnwrap(document["paths"] as? [String: [String: Any]], "the document has no paths")
        return Set(paths.flatMap { path, item in
            item.keys.filter { methods.contains($0) }.map { "\($0.uppercased()) \(path)" }
        })
    }

    func testEveryRouteIsDocumentedAndEveryDocumentedOperationIsRouted() throws {
        let all = Set(try Self.router().routes.map { "\($0.method.rawValue) \($0.path.description)" })
        // The web console's HTML pages (docs/console.md) are for browsers, not part of the API the document describes.
        let console = all.filter { $0.split(separator: " ", maxSplits: 1).last?.hasPrefix("/console") == true }
        XCTAssertFalse(console.isEmpty, "the console is served by default")
        let routed = all.subtracting(console)
        let documented = try Self.documentedOperations(try Self.document())
        XCTAssertGreaterThanOrEqual(routed.count, 20, "the router lists too few routes: \(routed.sorted())")
        XCTAssertEqual(routed.subtracting(documented).sorted(), [], "routed but not in docs/openapi.json (edit scripts/openapi.py)")
        XCTAssertEqual(documented.subtracting(routed).sorted(), [], "in docs/openapi.json but not routed")
    }

    func testServesTheDocumentByteForByte() async throws {
        let expected = try Data(contentsOf: Self.documentURL)
        try await Application(router: try Self.router(), logger: TestSupport.logger).test(.router) { client in
            try await client.execute(uri: "/openapi.json", method: .get) { response in
                XCTAssertEqual(response.status, .ok)
                XCTAssertEqual(response.headers[.contentType], "application/json; charset=utf-8")
                XCTAssertNotNil(response.headers[.init("X-Request-ID")!], "X-Request-ID")
                XCTAssertTrue(
                    Data(buffer: response.body) == expected,
                    "GET /openapi.json differs from docs/openapi.json: run python3 scripts/openapi.py to write both from one description")
            }
        }
    }

    func testTheDocumentHoldsTogetherAsOpenAPI31() throws {
        let document = try Self.document()
        XCTAssertEqual(document["openapi"] as? String, "3.1.0")
        let info = try XCTUnwrap(document["info"] as? [String: Any], "info")
        XCTAssertNotNil(info["title"] as? String, "info.title")
        XCTAssertNotNil(info["version"] as? String, "info.version")
        let components = try XCTUnwrap(document["components"] as? [String: Any], "components")
        let schemes = try XCTUnwrap(components["securitySchemes"] as? [String: [String: Any]], "securitySchemes")
        XCTAssertEqual(
            Set(schemes.values.compactMap { $0["in"] as? String == "query" ? $0["name"] as? String : nil }), ["ckAPIToken", "ckWebAuthToken"])
        XCTAssertEqual(
            Set(schemes.values.compactMap { $0["in"] as? String == "header" ? $0["name"] as? String : nil }),
            ["X-Apple-CloudKit-Request-KeyID", "X-Apple-CloudKit-Request-ISO8601Date", "X-Apple-CloudKit-Request-SignatureV1"])

        // Every $ref points at something that exists.
        var references: [String] = []
        func collect(_ value: Any) {
            if let object = value as? [String: Any] {
                if let target = object["$ref"] as? String { references.append(target) }
                object.values.forEach(collect)
            } else if let array = value as? [Any] {
                array.forEach(collect)
            }
        }
        collect(document)
        XCTAssertFalse(references.isEmpty)
        for target in Set(references) {
            XCTAssertTrue(target.hasPrefix("#/"), "\(target) is not a local reference")
            var node: Any? = document
            for part in target.dropFirst(2).split(separator: "/") { node = (node as? [String: Any])?[String(part)] }
            XCTAssertNotNil(node, "\(target) does not resolve")
        }

        let parameters = components["parameters"] as? [String: [String: Any]] ?? [:]
        let responses = components["responses"] as? [String: [String: Any]] ?? [:]
        func resolved(_ value: [String: Any], in table: [String: [String: Any]]) -> [String: Any] {
            (value["$ref"] as? String).flatMap { table[String($0.split(separator: "/").last ?? "")] } ?? value
        }
        var operationIDs: [String] = []
        let paths = try XCTUnwrap(document["paths"] as? [String: [String: Any]])
        for (path, item) in paths {
            // Each {parameter} of the path is declared as a required path parameter, and nothing else is.
            let named = Set(path.split(separator: "/").filter { $0.hasPrefix("{") }.map { String($0.dropFirst().dropLast()) })
            for method in Self.methods {
                guard let operation = item[method] as? [String: Any] else { continue }
                let place = "\(method.uppercased()) \(path)"
                let declared = ((item["parameters"] as? [[String: Any]] ?? []) + (operation["parameters"] as? [[String: Any]] ?? []))
                    .map { resolved($0, in: parameters) }.filter { $0["in"] as? String == "path" }
                XCTAssertEqual(Set(declared.compactMap { $0["name"] as? String }), named, "\(place): path parameters")
                XCTAssertTrue(declared.allSatisfy { $0["required"] as? Bool == true }, "\(place): path parameters are required")
                if let id = operation["operationId"] as? String { operationIDs.append(id) } else { XCTFail("\(place): no operationId") }
                XCTAssertNotNil(operation["security"] as? [Any], "\(place): security is stated (empty for none)")
                for requirement in operation["security"] as? [[String: Any]] ?? [] {
                    for scheme in requirement.keys { XCTAssertNotNil(schemes[scheme], "\(place): unknown security scheme \(scheme)") }
                }
                let answers = try XCTUnwrap(operation["responses"] as? [String: [String: Any]], "\(place): responses")
                // A 200 answer, or (a route that sends the browser elsewhere) a redirect with its Location.
                let redirect = answers.first { $0.key.hasPrefix("3") }
                XCTAssertTrue(answers["200"] != nil || (redirect?.value["headers"] as? [String: Any])?["Location"] != nil, "\(place): a 200 answer")
                // Every error of a CloudKit or sign-in route is CloudKit's error dictionary, and 500 is listed as never expected.
                guard path.hasPrefix("/database/") || path.hasPrefix("/auth/") else { continue }
                XCTAssertNotNil(answers["500"], "\(place): 500 is documented")
                for (status, answer) in answers where status != "200" && status != redirect?.key {
                    let schema = ((resolved(answer, in: responses)["content"] as? [String: Any])?["application/json"] as? [String: Any])?["schema"]
                    let parts = ((schema as? [String: Any])?["allOf"] as? [[String: Any]]) ?? []
                    XCTAssertTrue(parts.contains { $0["$ref"] as? String == "#/components/schemas/Error" }, "\(place) \(status): not the error dictionary")
                }
            }
        }
        XCTAssertEqual(operationIDs.count, Set(operationIDs).count, "operationIds are unique")
    }
}
