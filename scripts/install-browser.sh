#!/usr/bin/env bash
# Install the browser of the page test (tests/test_serve_page.py): Debian's chromium package, which Playwright
# drives through executable_path (Playwright's own browser download is never used). Does nothing when chromium
# is already on PATH. Needs apt-get and root (or password-less sudo); without them it says so and exits 0, and
# the page tests skip, unless NMT_REQUIRE_BROWSER=1 (as in .ci/run) makes that an error.
# Usage: scripts/install-browser.sh
set -euo pipefail
if found=$(command -v chromium); then
  echo "install-browser: chromium already installed at $found; nothing to do"
  exit 0
fi
sudo=()
if [ "$(id -u)" != 0 ] && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
fi
if ! command -v apt-get >/dev/null || { [ "$(id -u)" != 0 ] && [ ${#sudo[@]} = 0 ]; }; then
  echo "install-browser: no chromium, and installing it needs apt-get and root: install Chromium yourself" \
       "(e.g. sudo apt-get install chromium), or tests/test_serve_page.py will skip" >&2
  [ "${NMT_REQUIRE_BROWSER:-0}" = 1 ] && exit 1
  exit 0
fi
echo "install-browser: installing Debian's chromium package (apt-get update, apt-get install chromium)"
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
if ! found=$(command -v chromium); then
  echo "install-browser: apt-get installed chromium but it is not on PATH" >&2
  exit 1
fi
echo "install-browser: installed $found ($("$found" --version 2>/dev/null || true))"
