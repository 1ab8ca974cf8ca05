#!/usr/bin/env python3
"""An SMTP server for the email sign-up tests (EmailSignUpTests): listens on 127.0.0.1:PORT and
saves each message it accepts into FOLDER as NNN.eml (written under another name, then renamed),
its first line `X-Envelope-To:` the envelope's recipients. Writes FOLDER/ready once it listens and
runs until SIGTERM or SIGINT.

With --starttls it offers STARTTLS and requires it before any mail: it makes a test certificate
authority of its own (FOLDER/ca.pem, a fresh key each run) and a certificate it issues for
`localhost` and 127.0.0.1, and takes AUTH PLAIN (over TLS only) for the login `relay-user` with
the password `relay password`.

    smtp_test_server.py PORT FOLDER [--starttls]
"""
import datetime
import ipaddress
import itertools
import os
import signal
import ssl
import sys

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult


def test_authority(folder: str) -> ssl.SSLContext:
    """A CA and a server certificate it signed; writes the CA's certificate to FOLDER/ca.pem and
    answers the server's TLS context."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Stratus test authority")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
                                     decipher_only=False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    with open(os.path.join(folder, "ca.pem"), "wb") as file:
        file.write(ca.public_bytes(pem))
    chain = os.path.join(folder, "server.pem")
    with open(chain, "wb") as file:
        file.write(server.public_bytes(pem))
        file.write(key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(chain)
    os.remove(chain)
    return context


def authenticate(server, session, envelope, mechanism, auth_data):  # aiosmtpd's authenticator
    ok = mechanism == "PLAIN" and auth_data.login == b"relay-user" and auth_data.password == b"relay password"
    return AuthResult(success=ok)


def main() -> None:
    port, folder = int(sys.argv[1]), sys.argv[2]
    starttls = "--starttls" in sys.argv[3:]
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
    options = {}
    if starttls:
        options = dict(tls_context=test_authority(folder), require_starttls=True, authenticator=authenticate, auth_require_tls=True)
    controller = Controller(Save(), hostname="127.0.0.1", port=port, **options)
    controller.start()
    open(os.path.join(folder, "ready"), "w").close()
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    controller.stop()


if __name__ == "__main__":
    main()
