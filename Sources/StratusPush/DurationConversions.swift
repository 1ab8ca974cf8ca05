import NIOCore

extension Duration {
    /// The duration in seconds, as a floating-point number.
    var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }

    /// The same span as NIO's `TimeAmount`, saturating at its largest value.
    var timeAmount: TimeAmount {
        let (seconds, attoseconds) = components
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        return .nanoseconds(overflow ? .max : whole + attoseconds / 1_000_000_000)
    }
}
