#!/usr/bin/env python3
"""An SMTP server for the email sign-up tests (EmailSignUpTests): listens on 127.0.0.1:PORT and
saves each message it accepts into FOLDER as NNN.eml (written under another name, then renamed),
its first line `X-Envelope-To:` the envelope's recipients. Writes FOLDER/ready once it listens and
runs until SIGTERM or SIGINT.

    smtp_test_server.py PORT FOLDER
"""
import itertools
import os
import signal
import sys

from aiosmtpd.controller import Controller


def main() -> None:
    port, folder = int(sys.argv[1]), sys.argv[2]
    counter = itertools.count(1)

    class Save:
        async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
            name = os.path.join(folder, "%03d.eml" % next(counter))
            with open(name + ".part", "wb") as file:
                file.write(("X-Envelope-To: " + ",".join(envelope.rcpt_tos) + "\r\n").encode())
                file.write(envelope.original_content)
            os.rename(name + ".part", name)
            return "250 OK"

    # Signals are taken by sigwait below, in this thread: the server's thread inherits the mask.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    controller = Controller(Save(), hostname="127.0.0.1", port=port)
    controller.start()
    open(os.path.join(folder, "ready"), "w").close()
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    controller.stop()


if __name__ == "__main__":
    main()
