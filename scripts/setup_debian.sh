#!/usr/bin/env bash
# The Debian packages the tests use: Chromium and its WebDriver, for the search page's browser
# test (tests/app/serve/test_ui_browser.py; Selenium comes with the dev dependencies in
# requirements.lock), and dict-gcide, the real English text `bench scale` draws beyond the
# bundled collections (measure/bench/anchors.py). Needs root for apt; a second run only checks
# dpkg (well under a second).
set -euo pipefail
t0=$SECONDS
packages=(chromium chromium-driver dict-gcide)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  [[ "$(id -u)" == 0 ]] || { echo "setup_debian.sh: needs root to install ${missing[*]}" >&2; exit 2; }
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup_debian: $(chromium --version 2>/dev/null || echo 'chromium ?'), $(chromedriver --version 2>/dev/null | cut -d' ' -f1-2) ($((SECONDS - t0)) s)"
