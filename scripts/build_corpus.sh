#!/usr/bin/env bash
# Builds the Python training corpus for efim's fragment-tokenization fine-tuning.
#
#   scripts/build_corpus.sh [OUT_DIR]        (default: out/corpus, git-ignored)
#
# Source: the Debian 12 packages the base model efim-base-py was trained on
# (shared/models/efim-base-py/README.md). Packages are fetched with `apt-get download` into a
# cache (EFIM_DEB_CACHE, default out/debcache) and read with `dpkg-deb --fsys-tarfile` (the
# same files `dpkg-deb -x` would write): nothing is installed. scripts/build_corpus.py then
# keeps every *.py of 200 B..400 KB that is valid UTF-8, drops the Python standard library
# (anything under usr/lib/python3.X/ and any file whose sha256 equals a file of
# libpython3.11-stdlib / libpython3.11-minimal), samples 35% of ansible's files by hash (as the
# base model did), de-duplicates by sha256 (the first path in sorted order wins), and writes
#   OUT_DIR/files/<path in package>   the documents
#   OUT_DIR/manifest.tsv              path, package, bytes, sha256, split (train|valid), sorted by path
#   OUT_DIR/summary.txt               counts and bytes per package and per split, .deb versions, time
# The split is by content hash: valid when int(sha256[:8], 16) % 100 == 0 (about 1%).
# Deterministic for a given set of .deb files (their versions are listed in summary.txt).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
out="${1:-$root/out/corpus}"
cache="${EFIM_DEB_CACHE:-$root/out/debcache}"

corpus_packages=(
  ansible python3-astropy python3-botocore python3-django python3-docutils python3-jinja2
  python3-matplotlib python3-mypy python3-networkx python3-nltk python3-numpy python3-pandas
  python3-pip python3-pygments python3-requests python3-scipy python3-setuptools python3-sklearn
  python3-sphinx python3-sqlalchemy python3-sympy python3-tornado python3-twisted
)
stdlib_packages=(libpython3.11-stdlib libpython3.11-minimal)

mkdir -p "$cache"
start=$(date +%s)
# Download only what the cache lacks (a .deb named <package>_<version>_<arch>.deb).
for p in "${corpus_packages[@]}" "${stdlib_packages[@]}"; do
  if ! compgen -G "$cache/${p}_*.deb" >/dev/null; then
    echo "download $p"
    (cd "$cache" && apt-get download -q "$p" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
    compgen -G "$cache/${p}_*.deb" >/dev/null || { echo "error: apt-get download $p failed" >&2; exit 1; }
  fi
done
echo "downloads done in $(( $(date +%s) - start )) s (cache: $cache)"

/usr/bin/python3 "$here/build_corpus.py" --cache "$cache" --out "$out" \
  --packages "${corpus_packages[@]}" --stdlib "${stdlib_packages[@]}" \
  --sample ansible=35 --start-time "$start"
