import Foundation
import Hummingbird

/// `/health`, `/ready`, `/metrics` and `/openapi.json` (the API's OpenAPI document, docs/openapi.json).
struct OperationsRoutes<Context: StratusRequestContext>: Sendable {
    let dependencies: APIDependencies

    struct Status: Encodable {
        var status: String
        var checks: [String: String]?
    }

    func register(on router: Router<Context>) {
        router.get("/health") { _, _ in try json(Status(status: "ok")) }
        router.get("/ready") { _, context in
            var checks: [String: String] = [:]
            var ready = true
            for check in dependencies.readiness {
                do {
                    try await check.check()
                    checks[check.name] = "ok"
                } catch {
                    ready = false
                    checks[check.name] = "unreachable"
                    context.logger.warning("readiness check failed", metadata: ["check": "\(check.name)", "error": "\(error)"])
                }
            }
            var response = try json(Status(status: ready ? "ready" : "not ready", checks: checks))
            response.status = ready ? .ok : .serviceUnavailable
            return response
        }
        router.get("/metrics") { _, _ in
            var headers = HTTPFields()
            headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: dependencies.metrics() + (dependencies.containerMetrics?.render() ?? ""))))
        }
        router.get("/openapi.json") { _, _ in
            var headers = HTTPFields()
            headers[.contentType] = "application/json; charset=utf-8"
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: OpenAPIDocument.json)))
        }
    }
}
