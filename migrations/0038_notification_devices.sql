-- A device is not pushed its own change. A notification of a change its subscriber wrote from a
-- device that named itself (X-Stratus-Device-ID) keeps that device; a web courier token made by a
-- request naming a device keeps it too, and the courier (long poll or WebSocket) skips, without
-- handing them out, the notifications of its own device. The user's other devices, and couriers
-- that named no device, are handed every notification as before.
ALTER TABLE notifications ADD COLUMN device_id text;
ALTER TABLE courier_tokens ADD COLUMN device_id text;
