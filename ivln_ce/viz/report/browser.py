"""Headless Chromium for looking at the report as a person would: tests and screenshots.

Uses the system's ``chromium`` and ``chromedriver`` (Debian: ``apt-get install chromium
chromium-driver``) through Selenium, always with an explicit driver path so Selenium never
tries to download one, and with every background network feature switched off (the report
needs no network). Selenium is a ``[dev]`` dependency; this module imports it lazily.

    python -m ivln_ce.viz.report.browser PAGE.html OUT.png [--episode N] [--width 1400]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
CHROMEDRIVER = ("/usr/bin/chromedriver",)
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1")


class BrowserUnavailable(RuntimeError):
    """Chromium, its driver or Selenium is missing or would not start; the message says which."""


def _first(paths: tuple[str, ...], name: str) -> str:
    for p in paths:
        if Path(p).exists():
            return p
    found = shutil.which(name)
    if found:
        return found
    raise BrowserUnavailable(f"{name} not found (looked at {', '.join(paths)} and PATH); install it with "
                             "`apt-get install chromium chromium-driver`")


def start(width: int = 1400, height: int = 1000):
    """A headless Chromium WebDriver with browser console logging; the caller ends it with ``stop``."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:
        raise BrowserUnavailable("selenium is not installed (pip install -e '.[dev]')") from exc
    binary = _first(CHROMIUM, "chromium")
    driver_path = _first(CHROMEDRIVER, "chromedriver")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    profile = tempfile.mkdtemp(prefix="ivln-chromium-")
    for flag in FLAGS + (f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=opts)
    except Exception as exc:  # WebDriverException and OS errors alike: the browser could not start
        shutil.rmtree(profile, ignore_errors=True)
        raise BrowserUnavailable(f"{binary} with {driver_path} did not start: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
    driver.set_page_load_timeout(60)
    driver._ivln_profile = profile  # removed by stop()
    return driver


def stop(driver) -> None:
    profile = getattr(driver, "_ivln_profile", None)
    try:
        driver.quit()
    finally:
        if profile:
            shutil.rmtree(profile, ignore_errors=True)


def severe_logs(driver) -> list[dict]:
    """Console errors and failed loads since the last call."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def full_page_screenshot(driver, out: str | Path, width: int = 1400, max_height: int = 6000) -> Path:
    """Resize the window to the page's height (up to ``max_height``) and save a PNG."""
    h = int(driver.execute_script("return Math.ceil(document.documentElement.scrollHeight)"))
    driver.set_window_size(width, min(max(h, 400), max_height))
    time.sleep(0.3)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(out))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Screenshot a report page with headless Chromium")
    p.add_argument("page")
    p.add_argument("out")
    p.add_argument("--episode", type=int, default=1, help="episode to show on a tour page (1-based)")
    p.add_argument("--width", type=int, default=1400)
    p.add_argument("--max-height", type=int, default=6000)
    a = p.parse_args(argv)
    driver = start(a.width)
    try:
        driver.get(Path(a.page).resolve().as_uri() + f"#ep={a.episode}")
        time.sleep(0.5)
        full_page_screenshot(driver, a.out, a.width, a.max_height)
        for e in severe_logs(driver):
            print(f"console: {e['message']}")
    finally:
        stop(driver)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
