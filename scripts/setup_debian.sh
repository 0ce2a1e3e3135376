#!/usr/bin/env bash
# Debian's Chromium and its WebDriver, for the search page's browser test
# (tests/app/serve/test_ui_browser.py). Needs root for apt; a second run only checks dpkg (well
# under a second). Selenium itself comes with the dev dependencies (requirements.lock).
set -euo pipefail
t0=$SECONDS
packages=(chromium chromium-driver)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  [[ "$(id -u)" == 0 ]] || { echo "setup_browser.sh: needs root to install ${missing[*]}" >&2; exit 2; }
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup_browser: $(chromium --version 2>/dev/null || echo 'chromium ?'), $(chromedriver --version 2>/dev/null | cut -d' ' -f1-2) ($((SECONDS - t0)) s)"
