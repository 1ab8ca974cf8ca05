import StratusCore
import Tracing

/// The spans of database transactions. A transaction gets one only inside a traced request or
/// apply (a task with a trace context): background passes start no traces of their own, and with
/// tracing off the check is one task-local read.
enum StoreTracing {
    /// Runs `body` in a client span named after the code that opened the transaction
    /// (`RecordStore.modify`): the operation, never a statement's text or values. A failure is
    /// recorded by its SQLSTATE and message alone (`PostgresStore.describe`).
    static func span<T>(
        isolation: StaticString, caller: (file: StaticString, function: StaticString), _ body: ((any Span)?) async throws -> T
    ) async throws -> T {
        guard let context = InstrumentationContext.current else { return try await body(nil) }
        let span = startSpan(operationName(caller), context: context, ofKind: .client)
        defer { span.end() }
        if span.isRecording {
            span.attributes["db.system.name"] = "postgresql"
            span.attributes["db.operation.name"] = "TRANSACTION"
            span.attributes["db.transaction.isolation"] = "\(isolation)"
        }
        do {
            return try await InstrumentationContext.$current.withValue(span.context) { try await body(span) }
        } catch {
            span.setStatus(SpanStatus(code: .error, message: PostgresStore.describe(error)))
            throw error
        }
    }

    /// `Type.function` from a `#fileID` (`StratusPostgres/RecordStore.swift`) and a `#function`
    /// (`modify(_:zone:in:)`).
    static func operationName(_ caller: (file: StaticString, function: StaticString)) -> String {
        let file = caller.file.description, function = caller.function.description
        let type = file.split(separator: "/").last.map { $0.hasSuffix(".swift") ? $0.dropLast(6) : $0 } ?? Substring(file)
        let name = function.firstIndex(of: "(").map { function[..<$0] } ?? Substring(function)
        return "\(type).\(name)"
    }
}
