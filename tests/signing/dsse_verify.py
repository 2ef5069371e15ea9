"""Verifies a DSSE envelope with securesystemslib (secure-systems-lab, PyPI),
a verifier imgctl did not write: tests/it/signing.rs runs it.

usage: dsse_verify.py ENVELOPE_OR_BUNDLE.json PUBLIC_KEY.pem KEYID

Prints the verified payload's predicateType and the key type on success;
exits 1 with securesystemslib's own error when the signature does not hold.
A Sigstore bundle (mediaType application/vnd.dev.sigstore.bundle.v0.3+json)
is unwrapped to its dsseEnvelope first.
"""

import json
import sys

from cryptography.hazmat.primitives.serialization import load_pem_public_key
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey


def main() -> int:
    doc_path, key_path, keyid = sys.argv[1:4]
    with open(doc_path, encoding="utf-8") as f:
        doc = json.load(f)
    if "dsseEnvelope" in doc:
        doc = doc["dsseEnvelope"]
    envelope = Envelope.from_dict(doc)
    with open(key_path, "rb") as f:
        key = SSlibKey.from_crypto(load_pem_public_key(f.read()), keyid=keyid)
    try:
        envelope.verify([key], 1)
    except VerificationError as e:
        print(f"securesystemslib refused: {e}", file=sys.stderr)
        return 1
    statement = json.loads(envelope.payload)
    print(json.dumps({"keytype": key.keytype, "scheme": key.scheme,
                      "predicateType": statement.get("predicateType")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
