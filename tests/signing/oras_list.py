"""Lists the Sigstore bundles attached to an image with the ORAS Python SDK
(oras-py, PyPI), a registry client imgctl did not write: tests/it/signing.rs
runs it.

usage: oras_list.py HOST:PORT REPO DIGEST USER PASSWORD OUT_DIR

Asks the referrers API first and, on its 404 (distribution 2.8 has none),
reads the referrers tag `sha256-<hex>` (the OCI distribution spec's
fallback), then fetches every bundle's manifest and layer into OUT_DIR.
Prints one JSON line: how it listed them and each bundle's annotations,
layer digest and layer title (org.opencontainers.image.title).
"""

import hashlib
import json
import os
import sys

import oras.client

BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"
INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def main() -> int:
    host, repo, digest, user, password, out_dir = sys.argv[1:7]
    client = oras.client.OrasClient(hostname=host, insecure=True, auth_backend="basic")
    client.auth.set_basic_auth(user, password)
    api = client.do_request(f"http://{host}/v2/{repo}/referrers/{digest}", "GET",
                            headers={"Accept": INDEX})
    if api.status_code == 200:
        how, index = "referrers API", api.json()
    else:
        how = f"referrers tag (the API answered {api.status_code})"
        tag = digest.replace(":", "-")
        index = client.get_manifest(f"{host}/{repo}:{tag}", allowed_media_type=[INDEX])
    bundles = []
    for entry in index.get("manifests", []):
        if entry.get("artifactType") != BUNDLE:
            continue
        manifest = client.get_manifest(f"{host}/{repo}@{entry['digest']}",
                                       allowed_media_type=[MANIFEST])
        assert manifest["subject"]["digest"] == digest, manifest
        layer = manifest["layers"][0]
        blob = client.get_blob(f"{host}/{repo}", layer["digest"]).content
        assert "sha256:" + hashlib.sha256(blob).hexdigest() == layer["digest"]
        name = entry["digest"].replace(":", "-") + ".sigstore.json"
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(blob)
        bundles.append({"file": name, "annotations": manifest.get("annotations", {}),
                        "layer": layer["digest"],
                        "title": layer.get("annotations", {}).get("org.opencontainers.image.title")})
    print(json.dumps({"how": how, "bundles": bundles}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
