"""What a failed TLS connection to an MQTT broker is called in last_error and the log: as precisely as
the ssl error allows (an untrusted certificate, a broker that requires a client certificate), naming
the settings the connection's owner knows (the gateway's [[mqtt.brokers]] keys, the simulator's options).

The TLS files themselves are loaded by gateway/config/mqtt_tls.py, at each connection.
"""

from __future__ import annotations

import re
import ssl

from gateway.config.mqtt_tls import GATEWAY_TLS_NAMES, SOURCE_LOCATION, TlsSettingNames, ssl_text


def certificate_required_hint(names: TlsSettingNames = GATEWAY_TLS_NAMES) -> str:
    return (
        "the broker may require a client certificate and none is configured "
        f"({names.cert_file} and {names.key_file}{names.where})"
    )


CERTIFICATE_REQUIRED_HINT = certificate_required_hint()


_CLOSED_ON_HANDSHAKE = ("handshake failure", "bad certificate", "eof occurred in violation of protocol")
"""How a broker that wants a client certificate ends the TLS connection (an alert, or a bare close)."""


def describe_failure(
    exc: BaseException, has_client_certificate: bool, names: TlsSettingNames = GATEWAY_TLS_NAMES
) -> str:
    """What a failed TLS handshake (or a TLS alert right after it) means, as precisely as `exc` says."""
    text = ssl_text(exc)
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            f"TLS: the broker's certificate is not trusted ({exc.verify_message or text}); check {names.ca_file} "
            "and the broker's certificate (its CA, expiry and host names)"
        )
    return describe_alert(text, has_client_certificate, names)


def describe_alert(text: str, has_client_certificate: bool, names: TlsSettingNames = GATEWAY_TLS_NAMES) -> str:
    """The words of a TLS error (paho logs it when the broker ends the connection with a TLS alert)."""
    text = SOURCE_LOCATION.sub("", text).removeprefix("failed to receive on socket: ")
    lowered = text.lower()
    if "certificate required" in lowered or (
        not has_client_certificate and any(words in lowered for words in _CLOSED_ON_HANDSHAKE)
    ):
        if has_client_certificate:
            return f"TLS: the broker refused the client certificate ({text})"
        return f"TLS: the broker ended the handshake ({text}): {certificate_required_hint(names)}"
    if has_client_certificate and any(
        words in lowered for words in ("bad certificate", "unknown ca", "certificate unknown", "certificate expired")
    ):
        return f"TLS: the broker refused the client certificate ({text}); check {names.cert_file} and {names.key_file}"
    return f"TLS: {text}"


_SETTING = re.compile(r"\b(ca_file|cert_file|key_file)\b")


def reword(text: str, names: TlsSettingNames) -> str:
    """A TLS failure worded (above, or by client_context) with the gateway's setting names, in `names`:
    how the simulator's pumps, which connect with the gateway's broker client, name their options."""
    text = text.replace(CERTIFICATE_REQUIRED_HINT, certificate_required_hint(names))
    return _SETTING.sub(lambda match: str(getattr(names, match.group(1))), text)
