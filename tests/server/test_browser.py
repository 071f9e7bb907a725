"""The browsing page in a real browser: headless Chromium from Debian's packages (chromium,
chromium-driver) driven by selenium. A run imported from a shared trajectory (``snapstore
import``) is listed, a checkpoint is opened (roles, tool calls, folded long outputs), two
checkpoints are compared, the run is rolled back and forked with the page's buttons. Screenshots are
saved in tests/artifacts/server-browser/ (gitignored)."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("selenium")

from tests.helpers.server_fixtures import TOKEN, running_server  # noqa: E402

from snapstore import CheckpointManager  # noqa: E402
from snapstore.server import ServerSettings, create_app  # noqa: E402
from tests.helpers import paths

ARTIFACTS = paths.TESTS / "artifacts" / "server-browser"
TRAJECTORY = "sweagent-marshmallow1867-fcreplace.traj"
RUN = "swe/marshmallow-1867"


def _chromium() -> tuple[str, str]:
    browser = next((p for p in ("/usr/bin/chromium", shutil.which("chromium") or "") if p and os.path.exists(p)), None)
    driver = next((p for p in ("/usr/bin/chromedriver", shutil.which("chromedriver") or "") if p and os.path.exists(p)),
                  None)
    if not browser or not driver:
        pytest.skip("Chromium not found: /usr/bin/chromium and /usr/bin/chromedriver are missing "
                    "(apt-get install -y chromium chromium-driver; .ci/run does it)")
    return browser, driver


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = _chromium()
    profile = tempfile.mkdtemp(prefix="snapstore-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1400,1000"):
        opts.add_argument(flag)
    drv = webdriver.Chrome(service=Service(executable_path=driver), options=opts)
    drv.set_page_load_timeout(30)
    try:
        yield drv
    finally:
        drv.quit()
        shutil.rmtree(profile, ignore_errors=True)


def test_page_lists_an_imported_run_opens_a_checkpoint_diffs_and_rolls_back(tmp_path, shared_dir, browser):
    from click.testing import CliRunner
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    from snapstore.cli import cli

    repo = str(tmp_path / "repo")
    res = CliRunner().invoke(cli, ["--repo", repo, "import", str(shared_dir / TRAJECTORY), "--run", RUN, "-q"])
    assert res.exit_code == 0, res.output
    mgr = CheckpointManager(repo)
    cps = mgr.list(RUN)
    assert len(cps) >= 5
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    app = create_app(mgr, ServerSettings(token=TOKEN))
    drv = browser
    wait = WebDriverWait(drv, 20)

    def shot(name: str) -> None:
        assert drv.save_screenshot(str(ARTIFACTS / f"{name}.png"))

    def rows():
        return drv.find_elements(By.CSS_SELECTOR, "#checkpoints tbody tr")

    with running_server(app) as url:
        drv.get(url + "/")
        # without the token the page says so and lists nothing
        wait.until(EC.text_to_be_present_in_element((By.ID, "status"), "token"))
        assert drv.find_elements(By.CSS_SELECTOR, "#runs li") == []
        drv.find_element(By.ID, "token").send_keys(TOKEN)
        drv.find_element(By.ID, "token-save").click()
        link = wait.until(EC.element_to_be_clickable((By.CSS_SELECTOR, f'#runs a[data-run="{RUN}"]')))
        assert link.text == RUN
        shot("1-runs")
        link.click()
        wait.until(lambda d: len(rows()) == len(cps))
        assert [r.get_attribute("data-id") for r in rows()] == [c.id for c in cps]  # newest first
        assert drv.find_elements(By.CSS_SELECTOR, "#chart polyline.series-bytes")  # bytes over time
        assert drv.find_elements(By.CSS_SELECTOR, "#chart polyline.series-steps")
        shot("2-run")
        # open the newest checkpoint: messages with roles, tool calls, long outputs folded
        rows()[0].find_element(By.CSS_SELECTOR, "button.open").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#messages > li")) == cps[0].message_count)
        roles = [e.text.lower() for e in drv.find_elements(By.CSS_SELECTOR, "#messages > li > .role")]
        assert {"system", "user", "assistant", "tool"} <= set(roles)
        assert drv.find_elements(By.CSS_SELECTOR, "#messages .tool-call .name")
        folded = drv.find_elements(By.CSS_SELECTOR, "#messages details.folded")
        assert folded and not folded[0].get_attribute("open")
        assert "chars" in folded[0].find_element(By.TAG_NAME, "summary").text
        shot("3-checkpoint")
        # diff: oldest (A) against newest (B)
        rows()[-1].find_element(By.CSS_SELECTOR, 'input[name="pickA"]').click()
        rows()[0].find_element(By.CSS_SELECTOR, 'input[name="pickB"]').click()
        drv.find_element(By.ID, "diff-button").click()
        wait.until(EC.visibility_of_element_located((By.ID, "diff-view")))
        assert drv.find_elements(By.CSS_SELECTOR, "#diff .diff-op.insert .to > li")
        shot("4-diff")
        # roll back to the third newest checkpoint with the page's button (confirm dialog)
        target = cps[2]
        rows()[2].find_element(By.CSS_SELECTOR, "button.rollback").click()
        wait.until(EC.alert_is_present())
        drv.switch_to.alert.accept()
        wait.until(lambda d: len(rows()) == len(cps) - 2)
        assert rows()[0].get_attribute("data-id") == target.id
        wait.until(EC.text_to_be_present_in_element((By.ID, "status"), "rolled back to " + target.id))
        assert not drv.find_element(By.ID, "diff-view").is_displayed()  # the stale diff is gone
        shot("5-rolled-back")
        # fork the head into a new run with the page's button (prompt dialog)
        rows()[0].find_element(By.CSS_SELECTOR, "button.fork").click()
        wait.until(EC.alert_is_present())
        prompt = drv.switch_to.alert
        prompt.send_keys("swe/forked")
        prompt.accept()
        wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, '#runs a.current[data-run="swe/forked"]')))
        wait.until(lambda d: len(rows()) == 1 and d.find_element(By.ID, "run-title").text == "swe/forked")
        shot("6-forked")
    fresh = CheckpointManager(repo)
    assert fresh.latest(RUN).id == target.id
    assert [c.id for c in fresh.list(RUN)] == [c.id for c in cps[2:]]
    assert fresh.latest("swe/forked").messages == fresh.get(RUN, target.id).messages
    mgr.close()
    fresh.close()
