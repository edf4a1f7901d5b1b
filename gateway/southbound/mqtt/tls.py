"""What a failed TLS connection to an MQTT broker is called in last_error and the log: as precisely as
the ssl error allows (an untrusted certificate, a broker that requires a client certificate).

The TLS files themselves are loaded by gateway/config/mqtt_tls.py, at each connection.
"""

from __future__ import annotations

import ssl

from gateway.config.mqtt_tls import SOURCE_LOCATION, ssl_text

CERTIFICATE_REQUIRED_HINT = (
    "the broker may require a client certificate and none is configured (cert_file and key_file of the "
    "[[mqtt.brokers]] entry)"
)


_CLOSED_ON_HANDSHAKE = ("handshake failure", "bad certificate", "eof occurred in violation of protocol")
"""How a broker that wants a client certificate ends the TLS connection (an alert, or a bare close)."""


def describe_failure(exc: BaseException, has_client_certificate: bool) -> str:
    """What a failed TLS handshake (or a TLS alert right after it) means, as precisely as `exc` says."""
    text = ssl_text(exc)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            f"TLS: the broker's certificate is not trusted ({exc.verify_message or text}); check ca_file "
            "and the broker's certificate (its CA, expiry and host names)"
        )
    return describe_alert(text, has_client_certificate)


def describe_alert(text: str, has_client_certificate: bool) -> str:
    """The words of a TLS error (paho logs it when the broker ends the connection with a TLS alert)."""
    text = SOURCE_LOCATION.sub("", text).removeprefix("failed to receive on socket: ")
    lowered = text.lower()
    if "certificate required" in lowered or (
        not has_client_certificate and any(words in lowered for words in _CLOSED_ON_HANDSHAKE)
    ):
        if has_client_certificate:
            return f"TLS: the broker refused the gateway's client certificate ({text})"
        return f"TLS: the broker ended the handshake ({text}): {CERTIFICATE_REQUIRED_HINT}"
    if has_client_certificate and any(
        words in lowered for words in ("bad certificate", "unknown ca", "certificate unknown", "certificate expired")
    ):
        return f"TLS: the broker refused the gateway's client certificate ({text}); check cert_file and key_file"
    return f"TLS: {text}"
