#!/bin/sh
# Install Debian data packages (datasets, fonts) that dpemb reads, without network
# access at run time: `make fashion-mnist`, `make cjk-fonts`.
#   root:           apt-get install -y PACKAGES
#   sudo available: sudo apt-get install -y PACKAGES
#   otherwise:      apt-get download + dpkg-deb -x into ~/.cache/dpemb/debroot (no root needed);
#                   dpemb looks there for Fashion-MNIST; fonts are linked into
#                   ~/.local/share/fonts, which the glyph benchmark scans.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 PACKAGE..." >&2; exit 2; }
missing=""
for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "already installed:$(printf ' %s' "$@")"
    exit 0
fi
if [ "$(id -u)" = 0 ]; then
    apt-get install -y $missing
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo apt-get install -y $missing
else
    root="${DPEMB_CACHE:-$HOME/.cache/dpemb}/debroot"
    debs="${DPEMB_CACHE:-$HOME/.cache/dpemb}/debs"
    mkdir -p "$root" "$debs"
    (cd "$debs" && apt-get download $missing)
    for p in $missing; do
        dpkg-deb -x "$(ls -t "$debs/${p}"_*.deb | head -n 1)" "$root"
    done
    echo "extracted$missing into $root (no root rights: not installed system-wide)"
    if [ -d "$root/usr/share/fonts" ]; then  # a per-user font folder the glyph benchmark scans
        mkdir -p "$HOME/.local/share/fonts"
        ln -sfn "$root/usr/share/fonts" "$HOME/.local/share/fonts/dpemb-debroot"
        echo "fonts linked into $HOME/.local/share/fonts/dpemb-debroot"
    fi
fi
