#!/usr/bin/env python3
"""A CycloneDX 1.5 SBOM of the crates compiled into one imgctl binary.

    crates_sbom.py METADATA.json BINARY_NAME VERSION > sbom.cdx.json

METADATA.json is `cargo metadata --format-version 1 --filter-platform TARGET`
with the binary's features (`--no-default-features` for the front end): its
`resolve` graph holds exactly the crates that build compiles. Only the crates
reachable from imgctl through normal dependencies are listed (build scripts
and dev-dependencies are not in the binary). Each crate carries its version,
its package URL, its licence expression as Cargo.toml states it, and the
sha256 of its .crate file from Cargo.lock's checksum.
"""
import json
import sys
import uuid


def main() -> int:
    meta_path, binary, version = sys.argv[1:4]
    with open(meta_path) as f:
        meta = json.load(f)
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    root = meta["resolve"]["root"]
    # Normal dependencies only: the crates linked into the binary.
    seen, todo, edges = set(), [root], {}
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        deps = []
        for d in nodes[pid]["deps"]:
            if any(k.get("kind") in (None, "normal") for k in d["dep_kinds"]):
                deps.append(d["pkg"])
                todo.append(d["pkg"])
        edges[pid] = sorted(set(deps))

    def ref(pid: str) -> str:
        p = packages[pid]
        return f"pkg:cargo/{p['name']}@{p['version']}"

    components = []
    for pid in sorted(seen - {root}, key=lambda i: (packages[i]["name"], packages[i]["version"])):
        p = packages[pid]
        c = {
            "type": "library",
            "bom-ref": ref(pid),
            "name": p["name"],
            "version": p["version"],
            "purl": ref(pid),
        }
        if p.get("license"):
            c["licenses"] = [{"expression": p["license"]}]
        checksum = p.get("checksum") or checksum_of(meta, p)
        if checksum:
            c["hashes"] = [{"alg": "SHA-256", "content": checksum}]
        components.append(c)
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        # Reproducible: the serial number follows from the binary's name, version and crates.
        "serialNumber": "urn:uuid:"
        + str(uuid.uuid5(uuid.NAMESPACE_URL, f"imgctl:{binary}:{version}:" + ",".join(sorted(ref(i) for i in seen)))),
        "version": 1,
        "metadata": {
            "component": {
                "type": "application",
                "bom-ref": ref(root),
                "name": binary,
                "version": version,
                "purl": f"pkg:cargo/imgctl@{version}",
                "licenses": [{"expression": packages[root].get("license") or "NOASSERTION"}],
            },
            "tools": {"components": [{"type": "application", "name": "imgctl scripts/crates_sbom.py"}]},
        },
        "components": components,
        "dependencies": [{"ref": ref(pid), "dependsOn": [ref(d) for d in edges[pid]]} for pid in sorted(seen)],
    }
    json.dump(bom, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")
    return 0


_lock_cache = {}


def checksum_of(meta: dict, p: dict):
    """The .crate's sha256 from Cargo.lock (cargo metadata leaves it out)."""
    import tomllib

    lock = meta["workspace_root"] + "/Cargo.lock"
    if lock not in _lock_cache:
        with open(lock, "rb") as f:
            packages = tomllib.load(f).get("package", [])
        _lock_cache[lock] = {(q["name"], q["version"]): q.get("checksum") for q in packages}
    return _lock_cache[lock].get((p["name"], p["version"]))


if __name__ == "__main__":
    sys.exit(main())
