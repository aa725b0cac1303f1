#!/usr/bin/env bash
# Publish the built images: tag each accelbench-<image>:<version> (pyproject's version) for REGISTRY, push it, read
# the digest the registry gave it and record it in containers/versions.yaml (<image>.digests: reference -> digest).
#
#   containers/push.sh REGISTRY [IMAGE ...]   e.g. containers/push.sh ghcr.io/OWNER cuda habana (default: both)
#
# Build the images first (containers/README.md, "Build"); log in to the registry first (`docker login REGISTRY`).
# ENGINE: docker or podman (default: docker where it is on PATH, else podman). Nothing has been published yet: no
# registry is reachable where this project is tested, so every digests map in versions.yaml is empty until a push.
# tests/unit/test_artifact_docs.py runs this script against a stand-in engine (no registry) and checks versions.yaml.
set -euo pipefail
registry=${1:?usage: containers/push.sh REGISTRY [IMAGE ...] (e.g. ghcr.io/OWNER)}
registry=${registry%/}
shift
images=("$@")
[[ ${#images[@]} -gt 0 ]] || images=(cuda habana)
engine=${ENGINE:-$(command -v docker > /dev/null && echo docker || echo podman)}
cd "$(dirname "$0")/.."
version=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
for image in "${images[@]}"; do
    [[ -d containers/$image ]] || { echo "containers/push.sh: no recipe folder containers/$image" >&2; exit 2; }
    local_ref="accelbench-$image:$version"
    remote="$registry/accelbench-$image:$version"
    "$engine" image inspect "$local_ref" > /dev/null \
        || { echo "containers/push.sh: no local image $local_ref: build it first (containers/README.md)" >&2; exit 1; }
    "$engine" tag "$local_ref" "$remote"
    if [[ $(basename "$engine") == podman* ]]; then
        digest_file=$(mktemp)
        "$engine" push --digestfile "$digest_file" "$remote"
        digest=$(cat "$digest_file")
        rm -f "$digest_file"
    else
        "$engine" push "$remote"
        digest=$("$engine" image inspect --format '{{range .RepoDigests}}{{println .}}{{end}}' "$remote" \
            | grep -F "$registry/accelbench-$image@" | head -n 1 | cut -d @ -f 2 || true)
    fi
    [[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] || { echo "containers/push.sh: no digest read for $remote" >&2; exit 1; }
    # record it: the `digests:` line of this image's block in versions.yaml gets (or replaces) `"<remote>": <digest>`
    python3 - containers/versions.yaml "$image" "$remote" "$digest" << 'PY'
import re, sys
path, image, remote, digest = sys.argv[1:]
lines = open(path).read().splitlines()
start = lines.index(f"{image}:")
end = next((i for i in range(start + 1, len(lines)) if re.match(r"[A-Za-z_]", lines[i])), len(lines))
at = next(i for i in range(start, end) if re.match(r"  digests:", lines[i]))
entry = f'    "{remote}": {digest}'
lines[at] = re.sub(r"  digests:\s*\{\}", "  digests:", lines[at])
lines = [ln for ln in lines if not ln.startswith(f'    "{remote}": ')]
lines.insert(at + 1, entry)
open(path, "w").write("\n".join(lines) + "\n")
PY
    echo "$remote@$digest (recorded in containers/versions.yaml $image.digests)"
done
