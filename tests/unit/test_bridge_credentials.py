"""The stdio bridge's [auth.hmac] key follows its secret file: a rotated secret signs the next request,
however the file was rewritten."""

from __future__ import annotations

import os
import time
from pathlib import Path

from gateway.policy import hmac_signing
from gateway.policy.bridge_credentials import HmacKey

OLD = "k4pX9q2bV7mT1zR8sW3yN6cJ0dF5gH2uL8oA1eI4rQ7"
NEW = "Zr0Wq8Xk3Lm5Nb7Vc9Tf1Gh2Jd4Ks6Pa8Sd0Fg2Hj4L"


def test_a_same_size_rewrite_whose_mtime_is_set_back_signs_with_the_new_secret(tmp_path: Path) -> None:
    secret_file = tmp_path / "bridge.secret"
    secret_file.write_text(OLD + "\n")
    secret_file.chmod(0o600)
    key = HmacKey("bridge", OLD.encode(), str(secret_file))
    before = secret_file.stat()
    time.sleep(0.05)  # past the kernel's timestamp granularity, so the write's change time differs
    with secret_file.open("r+") as handle:  # in place, same size, its mtime then restored (cp -p, rsync -t)
        handle.write(NEW + "\n")
    os.utime(secret_file, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert secret_file.stat().st_size == before.st_size and secret_file.stat().st_ino == before.st_ino

    signed = key.headers("POST", "/mcp", b"{}")
    # The signature on the wire is the new secret's, before any refusal from the gateway.
    timestamp, nonce = signed[hmac_signing.HEADER_TIMESTAMP], signed[hmac_signing.HEADER_NONCE]
    canonical = hmac_signing.canonical_string("POST", "/mcp", timestamp, nonce, b"{}")
    assert signed[hmac_signing.HEADER_SIGNATURE] == hmac_signing.signature(NEW.encode(), canonical)


def test_a_bad_signature_refusal_reads_the_file_again_and_resends_once_when_the_secret_differs(
    tmp_path: Path,
) -> None:
    # Where the file's times tell nothing (a filesystem without a change time, a rewrite within one tick
    # of the last look), the gateway's "does not match" is what sends the bridge back to the file.
    secret_file = tmp_path / "bridge.secret"
    secret_file.write_text(NEW + "\n")
    secret_file.chmod(0o600)
    key = HmacKey("bridge", OLD.encode(), str(secret_file))  # its look at the file already taken
    refusal = {"error": "invalid_token", "error_description": hmac_signing.BAD_SIGNATURE}
    assert key.resend_after(401, refusal, 0) == 0.0
    assert key.secret == NEW.encode()
    assert key.resend_after(401, refusal, 1) is None  # the same secret again: the refusal goes to the host
