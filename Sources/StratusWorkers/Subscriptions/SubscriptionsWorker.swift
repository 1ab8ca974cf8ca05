import StratusPush

extension WorkerDefinition {
    /// `stratus-subscriptions`: the notification log (`SubscriptionsProjection`) and the dispatcher
    /// that sends its pushes by webhook and APNs. Reads `WorkerSettings.delivery` and
    /// `webhookAllowInsecureLoopback`. Rebuilt after pruning from the snapshot's positions alone.
    public static let subscriptions = WorkerDefinition(
        name: "stratus-subscriptions", projection: SubscriptionsProjection(),
        services: { context in
            var webhookConfiguration = WebhookSenderConfiguration()
            webhookConfiguration.allowInsecureLoopback = context.settings.webhookAllowInsecureLoopback
            let webhooks = WebhookSender(configuration: webhookConfiguration, logger: context.logger)
            let apns = APNsChannel(store: context.store, logger: context.logger)
            return [DeliveryDispatcher(
                store: context.store, channels: [WebhookChannel(sender: webhooks, store: context.store, logger: context.logger), apns],
                configuration: context.settings.delivery, logger: context.logger
            ) {
                try? await webhooks.shutdown()
                await apns.shutdown()
            }]
        },
        // Its state is the notification log, which a replay never resets (every notification a
        // pruned event made is already in it): after pruning it starts at the snapshot's positions
        // with nothing to write.
        seed: { _, _, _ in })
}
