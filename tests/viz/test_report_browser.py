"""The report in a real browser: headless Chromium from file://, no console errors, sorting,
the DTW drawing, the episode slider, a playable H.264 video, non-blank screenshots.

Skipped (with the reason) only where Chromium, chromedriver or Selenium is missing or will not
start; `.ci/run` installs Chromium where it can.
"""

import gzip
import json
import shutil
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from ivln_ce.viz.report import build_report
from ivln_ce.viz.report.browser import BrowserUnavailable, full_page_screenshot, severe_logs, start, stop


@pytest.fixture(scope="module")
def browser():
    try:
        driver = start(1300, 1000)
    except BrowserUnavailable as exc:
        pytest.skip(f"no headless Chromium: {exc}")
    yield driver
    stop(driver)


@pytest.fixture(scope="module")
def report(evaluated, tmp_path_factory):
    return build_report(evaluated, tmp_path_factory.mktemp("browser_report") / "report", progress=False, workers=1)


def not_blank(png_path, min_std=20.0):
    img = cv2.imread(str(png_path))
    assert img is not None and img.shape[0] >= 400 and img.shape[1] >= 1000
    assert float(img.std()) > min_std, f"{png_path} looks blank (pixel std {img.std():.1f})"
    # not one flat colour over most of the picture either
    _, counts = np.unique(img.reshape(-1, 3) // 8, axis=0, return_counts=True)
    assert counts.max() < 0.9 * img.shape[0] * img.shape[1]


def wait_for(driver, script, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for: {script}")


def test_index_page(browser, report, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(report.index.resolve().as_uri())
    wait_for(browser, "return document.readyState === 'complete'")
    table = browser.find_element(By.ID, "metrics")
    rows = table.find_elements(By.CSS_SELECTOR, "tbody tr")
    assert [r.get_attribute("data-run") for r in rows] == ["oracle_val_unseen", "random_val_unseen"]
    header = table.find_element(By.XPATH, ".//th[@data-col='t-nDTW']")
    header.click()  # ascending: random (lower t-nDTW) first
    assert [r.get_attribute("data-run") for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")] == ["random_val_unseen", "oracle_val_unseen"]
    assert header.get_attribute("aria-sort") == "ascending"
    header.click()
    assert [r.get_attribute("data-run") for r in table.find_elements(By.CSS_SELECTOR, "tbody tr")] == ["oracle_val_unseen", "random_val_unseen"]
    bars = browser.find_elements(By.CSS_SELECTOR, "#tndtw-bars-random_val_unseen rect.bar")
    assert len(bars) == 6
    assert severe_logs(browser) == []
    not_blank(full_page_screenshot(browser, tmp_path / "index.png"))


def test_tour_page_alignment_slider_and_media(browser, report, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    page = report.index.parent / "random_val_unseen" / "tour_0.html"
    browser.set_window_size(1300, 1000)
    browser.get(page.resolve().as_uri())
    wait_for(browser, "return document.readyState === 'complete'")
    alignment = browser.find_element(By.ID, "alignment")
    assert alignment.is_displayed() and alignment.size["width"] > 300
    pairs = alignment.find_elements(By.CSS_SELECTOR, "path.pairs")
    assert len(pairs) == 6 and all(len(p.get_attribute("d")) > 20 for p in pairs)
    # the pairs really render: the drawing has a non-zero bounding box inside the figure
    bbox = browser.execute_script("return document.querySelector('#alignment path.pairs').getBBox().width")
    assert bbox > 0.1
    ids = browser.execute_script("return JSON.parse(document.getElementById('tour-data').textContent).episodes.map(e => e.id)")
    assert browser.find_element(By.ID, "ep-index").text == "1"
    assert browser.find_element(By.ID, "ep-id").text == ids[0]
    # first episode: frames recorded, no video
    wait_for(browser, "return document.getElementById('img-first').complete && document.getElementById('img-first').naturalWidth > 0")
    assert browser.find_element(By.ID, "fig-video").get_attribute("hidden") is not None

    slider = browser.find_element(By.ID, "episode-slider")
    slider.send_keys(Keys.ARROW_RIGHT)  # step to the second episode with the slider
    wait_for(browser, "return document.getElementById('ep-index').textContent === '2'")
    assert browser.find_element(By.ID, "ep-id").text == ids[1]
    assert slider.get_attribute("value") == "1"
    selected = browser.execute_script("return Array.from(document.querySelectorAll('svg.tourmap g.ep.sel')).map(g => [g.ownerSVGElement.id, g.dataset.ep])")
    assert sorted(selected) == [["alignment", "1"], ["plan", "1"]]
    assert browser.find_element(By.CSS_SELECTOR, "table.episodes tr.sel").get_attribute("data-ep") == "1"
    # zooming the drawings to the selected episode, and back to the whole tour
    def view_box():
        return browser.execute_script("return document.getElementById('alignment').getAttribute('viewBox')")

    full = view_box()
    browser.find_element(By.ID, "zoom").click()
    assert float(view_box().split()[2]) < float(full.split()[2])
    browser.find_element(By.ID, "zoom").click()
    assert view_box() == full
    # the maps of the second episode are loaded; its H.264 video plays in Chromium
    wait_for(browser, "return document.getElementById('img-ego').complete && document.getElementById('img-ego').naturalWidth == 192")
    wait_for(browser, "return document.getElementById('img-allo').naturalWidth > 50")
    assert browser.find_element(By.ID, "fig-video").get_attribute("hidden") is None
    wait_for(browser, "return document.getElementById('ep-video').readyState >= 2 && document.getElementById('ep-video').videoWidth > 0", 20)
    assert browser.execute_script("return document.getElementById('ep-video').error") is None
    assert severe_logs(browser) == []
    not_blank(full_page_screenshot(browser, tmp_path / "tour.png"))
    # and the third episode, via the list: no frames, no video, maps still there
    browser.find_element(By.CSS_SELECTOR, "table.episodes tr[data-ep='2']").click()
    wait_for(browser, "return document.getElementById('ep-index').textContent === '3'")
    assert browser.find_element(By.ID, "fig-first").get_attribute("hidden") is not None
    assert browser.find_element(By.ID, "fig-ego").get_attribute("hidden") is None
    assert severe_logs(browser) == []


def test_an_instruction_with_comment_and_script_markup_renders(browser, small_results, tmp_path):
    """``<!--`` and ``</script>`` in an instruction neither break the page's data nor its stepper."""
    from selenium.webdriver.common.by import By

    res = tmp_path / "results"
    shutil.copytree(small_results, res)
    stats_file = res / "iterative_stats_ckpt_random_val_unseen.json"
    stats = json.loads(stats_file.read_text())
    source = Path(stats["config"]["data"]["episodes"].replace("{split}", "val_unseen"))
    episodes = json.loads(gzip.decompress(source.read_bytes()))
    first = json.loads((res / "dtw_data_ckpt_random_val_unseen.json").read_text())["0"][0]["episode_id"]
    text = "Walk past the sofa <!-- x </script> and stop <b>here</b> & wait."
    for e in episodes["episodes"]:
        if str(e["episode_id"]) == first:
            e["instruction"]["instruction_text"] = text
    (tmp_path / "episodes.json.gz").write_bytes(gzip.compress(json.dumps(episodes).encode()))
    stats["config"]["data"]["episodes"] = str(tmp_path / "episodes.json.gz")
    stats_file.write_text(json.dumps(stats))
    rep = build_report(res, tmp_path / "report", progress=False, workers=1)
    browser.get(rep.pages[0].resolve().as_uri())
    wait_for(browser, "return document.readyState === 'complete'")
    wait_for(browser, "return document.getElementById('ep-id').textContent.length > 0")
    assert browser.find_element(By.ID, "ep-id").text == first
    assert browser.find_element(By.ID, "ep-instruction").text == f"\u201c{text}\u201d"
    assert browser.execute_script("return JSON.parse(document.getElementById('tour-data').textContent).episodes[0].instruction") == text
    wait_for(browser, "return document.getElementById('img-ego').complete && document.getElementById('img-ego').naturalWidth > 0")
    assert severe_logs(browser) == []


def test_a_missing_browser_is_reported_with_the_reason(monkeypatch):
    from ivln_ce.viz.report import browser as b

    monkeypatch.setattr(b, "CHROMIUM", ("/nonexistent/chromium",))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(BrowserUnavailable, match="chromium not found|selenium is not installed"):
        b.start()
