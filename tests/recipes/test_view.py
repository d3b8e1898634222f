"""`tempering view RUN`: one self-contained page; in headless Chromium it loads, filters and draws."""

import json
import os

import pytest
import yaml

from tempering.cli import main
from tempering.recipes.view import page_data, render

EVIL = "</script><b id='injected'>bold</b>"


def _sample(step, reward, status, text="42", feedback="", advantage=0.5):
    return {
        "step": step,
        "task": f"t{step}",
        "prompt": "2+40=",
        "turns": [{"text": text, "score": reward, "status": status, "feedback": feedback, "advantage": advantage}],
        "reward": reward,
        "stop_reason": "success" if status == "correct" else "max_turns",
    }


@pytest.fixture
def run(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "config.yaml").write_text(yaml.safe_dump({"model": {"name": "tiny-xs"}, "task": {"family": "arithmetic"}}))
    metrics = [
        {"step": 0, "eval/pass@1": 0.1, "eval/n": 8},
        {"step": 1, "reward": 0.25, "entropy": 2.0},
        {"step": 2, "reward": 0.5, "entropy": 1.5},
        {"step": 2, "eval/pass@1": 0.4, "eval/n": 8},
    ]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    samples = [
        _sample(1, 1.0, "correct"),
        _sample(1, 0.0, "incorrect", "41", "wrong: too small", -0.5),
        _sample(1, 0.0, "parse_error", EVIL, "not a number", -0.5),
        _sample(2, 1.0, "correct"),
        _sample(2, 1.0, "correct"),
        _sample(2, 0.0, "incorrect", "43", "wrong: too large", -1.0),
    ]
    (d / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
    return d


def test_the_page_holds_everything_and_no_model_text_as_html(run):
    data = page_data(run)
    assert data["title"] == "run · tiny-xs · arithmetic" and len(data["samples"]) == 6
    assert data["curves"].startswith("data:image/png;base64,")  # drawn from metrics.jsonl (no curves.png yet)
    assert [e["pass@1"] for e in data["evals"]] == [0.1, 0.4]
    html = render(run)
    assert EVIL not in html and "</script><b" not in html
    assert main(["view", str(run)]) == 0 and (run / "view.html").read_text() == html


def test_smooth_redraws_the_curves_and_a_weight_outside_0_1_is_one_line(run, capsys):
    (run / "curves.png").write_bytes(b"\x89PNG the run's own")
    assert page_data(run)["curves"].endswith(__import__("base64").b64encode(b"\x89PNG the run's own").decode())
    smoothed = page_data(run, smooth=0.6)["curves"]
    assert smoothed.startswith("data:image/png;base64,") and "the run" not in smoothed
    before = sorted(p.name for p in run.iterdir())
    assert main(["view", str(run), "--smooth", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--smooth 1 is not a smoothing weight" in err
    assert sorted(p.name for p in run.iterdir()) == before


@pytest.mark.slow
def test_the_page_loads_and_filters_in_headless_chromium(run, tmp_path):
    pytest.importorskip("selenium")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from tempering.envs.gui.browser import CHROME_FLAGS, chromium_paths

    chromium, driver_path = chromium_paths()
    if not (os.access(chromium, os.X_OK) and os.access(driver_path, os.X_OK)):
        pytest.skip("Chromium and chromedriver are not installed (apt-get install chromium chromium-driver)")
    assert main(["view", str(run)]) == 0
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument("--window-size=1200,1600")
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        driver.get((run / "view.html").as_uri())
        count = lambda: driver.find_element(By.ID, "count").text
        shown = lambda: [c for c in driver.find_elements(By.CSS_SELECTOR, ".sample") if c.is_displayed()]
        assert driver.title == "run · tiny-xs · arithmetic"
        assert count() == "6 of 6 samples"
        assert driver.execute_script("return document.querySelector('#curves img').naturalWidth") > 0
        assert not driver.find_elements(By.ID, "injected")  # model text stays text
        assert any(EVIL in c.text for c in shown())
        assert "advantage -0.500" in shown()[1].text and "wrong: too small" in shown()[1].text
        Select(driver.find_element(By.ID, "f-step")).select_by_value("2")
        assert count() == "3 of 6 samples" and all(c.text.startswith("step 2") for c in shown())
        Select(driver.find_element(By.ID, "f-status")).select_by_value("correct")
        assert count() == "2 of 6 samples"
        Select(driver.find_element(By.ID, "f-step")).select_by_value("")
        assert count() == "3 of 6 samples"
        Select(driver.find_element(By.ID, "f-status")).select_by_value("")
        driver.find_element(By.ID, "f-max").send_keys("0.5")
        assert count() == "3 of 6 samples" and all("reward 0" in c.text for c in shown())
        shot = tmp_path / "view.png"
        assert driver.save_screenshot(str(shot)) and shot.read_bytes()[:4] == b"\x89PNG"
    finally:
        driver.quit()
