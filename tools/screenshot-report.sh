#!/usr/bin/env bash
# Render a report in headless Chromium (Debian's `chromium` package) to a PNG.
#   tools/screenshot-report.sh reports/latest/report.html docs/img/report-quick.png [WIDTH] [HEIGHT]
set -euo pipefail
html="${1:?usage: $0 REPORT.html OUT.png [WIDTH] [HEIGHT]}"
png="${2:?usage: $0 REPORT.html OUT.png [WIDTH] [HEIGHT]}"
width="${3:-1300}"
height="${4:-2400}"
browser="$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)"
if [ -z "$browser" ]; then
  echo "screenshot-report: no chromium found (Debian: apt-get install chromium)" >&2
  exit 3
fi
[ -s "$html" ] || { echo "screenshot-report: $html: no such report (or empty)" >&2; exit 2; }
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
mkdir -p "$(dirname "$png")"
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars \
  --user-data-dir="$profile" --window-size="${width},${height}" \
  --screenshot="$(realpath -m "$png")" "file://$(realpath "$html")" >/dev/null 2>&1
[ -s "$png" ] || { echo "screenshot-report: chromium wrote no image" >&2; exit 1; }
echo "$png"
