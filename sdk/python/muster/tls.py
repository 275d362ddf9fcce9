"""Verifying musterd's certificate over https, standard library only (ssl).

musterd serves TLS whenever it listens beyond loopback, with --tls-cert or a
self-signed certificate it keeps in its state dir; it writes the
certificate's path and SHA-256 fingerprint into musterd.json and gives the
fingerprint to every worker (MUSTER_TLS_FINGERPRINT). A client verifies, in
this order of where it learns how:
  1. the arguments (Client(ca_file=..., tls_fingerprint=...), muster --ca-file/--tls-fingerprint);
  2. the environment: MUSTER_CA_FILE (a PEM CA bundle; the host name or
     address is checked), MUSTER_TLS_FINGERPRINT (a pin);
  3. musterd.json's "tls" (the fingerprint, pinned), when it names the URL in use;
  4. else the system's CAs.
A CA file and a pin together must both pass. A certificate that fails raises
MusterError(code="untrusted_certificate") saying what was expected and what
came; nothing falls back to plain http.
"""
import hashlib
import ssl
from typing import Optional

from .errors import MusterError

UNTRUSTED = "untrusted_certificate"


def parse_fingerprint(text: str, source: str) -> str:
    """64 hex digits (colons and case ignored) -> lowercase hex; MusterError naming `source` otherwise.

    Example::

        muster.tls.parse_fingerprint("AB:CD:...", "MUSTER_TLS_FINGERPRINT")
    """
    digits = text.replace(":", "").strip().lower()
    if len(digits) != 64 or any(c not in "0123456789abcdef" for c in digits):
        raise MusterError("%s must be the SHA-256 fingerprint of musterd's certificate (64 hex digits, colons "
                          "allowed), not %r" % (source, text), code="invalid_argument", field=source)
    return digits


class TlsVerify:
    """How one daemon's certificate is checked: a CA file, a pinned SHA-256, both, or the system's CAs."""

    def __init__(self, ca_file: Optional[str] = None, fingerprint: Optional[str] = None, source: str = "") -> None:
        self.ca_file = ca_file or None
        self.fingerprint = parse_fingerprint(fingerprint, source or "tls_fingerprint") if fingerprint else None
        self.source = source  # where the settings came from, for errors

    def __repr__(self):
        return "TlsVerify(ca_file=%r, fingerprint=%r, source=%r)" % (self.ca_file, self.fingerprint, self.source)

    def context(self) -> ssl.SSLContext:
        """The context for a connection: chain and host checked unless only a pin is given."""
        if self.fingerprint and not self.ca_file:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE  # the pin below is the check
        else:
            try:
                ctx = ssl.create_default_context(cafile=self.ca_file)
            except (OSError, ssl.SSLError) as err:
                raise MusterError("cannot read the CA file %s (%s): %s" % (self.ca_file, self.source, err),
                                  code=UNTRUSTED, field="ca_file") from None
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        return ctx

    def check(self, sock, where: str) -> None:
        """After the handshake: the peer's certificate against the pin (if any)."""
        if not self.fingerprint:
            return
        der = sock.getpeercert(binary_form=True)
        got = hashlib.sha256(der).hexdigest() if der else "(no certificate)"
        if got != self.fingerprint:
            raise MusterError("the certificate of %s has SHA-256 fingerprint %s, not the pinned %s (from %s): not "
                              "this musterd, or one with another certificate; nothing was sent"
                              % (where, got, self.fingerprint, self.source), code=UNTRUSTED)

    def refused(self, where: str, err: Exception) -> MusterError:
        """A handshake that failed verification (ssl.SSLCertVerificationError), as a MusterError."""
        hint = ("the CA file %s" % self.ca_file) if self.ca_file else \
            "the system's CAs (set MUSTER_CA_FILE to musterd.json's tls.cert, or MUSTER_TLS_FINGERPRINT)"
        return MusterError("the certificate of %s is not trusted by %s: %s" % (where, hint, getattr(
            err, "verify_message", None) or err), code=UNTRUSTED)
