#!/usr/bin/env bash
# Debian's headless Chromium for the report's browser test (tests/test_report_browser.py drives
# it over the DevTools pipe, so no WebDriver is needed). Idempotent: does nothing when
# /usr/bin/chromium exists. Needs apt and root (or sudo).
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
command -v apt-get >/dev/null || { echo "install-chromium: no apt-get; install Chromium by hand" >&2; exit 1; }
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-chromium: root is needed to install chromium" >&2; exit 1; }
    sudo="sudo"
fi
echo "install-chromium: installing Debian's chromium" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
