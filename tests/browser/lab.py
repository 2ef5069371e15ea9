"""JupyterLab and TensorBoard in a real browser, for the end-to-end test
(tests/it/image_e2e/browser.rs): Debian's headless Chromium driven through
chromium-driver by Selenium.

    python lab.py JUPYTER_BASE TOKEN TENSORBOARD_BASE OUT_DIR

1. Without the token, /lab must not load the Lab (the login page asks for it).
2. It writes the notebook nb-run.ipynb (three cells: torch's version,
   `!imgctl verify --level quick`, a 30-step `!imgctl train-demo`) through the
   Contents API, opens it in the Lab, runs the cells one by one with
   Shift+Enter as a person does, and reads each cell's output back from the
   page. OUT_DIR/lab.png is the screenshot of the notebook after the run.
3. It opens TensorBoard and waits until its scalars page shows the run's
   `train/loss`; OUT_DIR/tensorboard.png is that page.

Prints one JSON object on stdout: {"cells": [...], "console_errors": [...],
"without_token": "...", "tensorboard": "...", "seconds": {...}}. Exits 1 with
the reason on stderr when a step does not happen within its bound.
"""

import json
import os
import sys
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.common.action_chains import ActionChains

CELLS = [
    "import torch; torch.__version__",
    "!imgctl verify --level quick",
    "!imgctl train-demo --preset tiny --device cpu --steps 30 --out /workspace/nb-run",
]
NOTEBOOK = "nb-run.ipynb"


def fail(why):
    print(f"lab.py: {why}", file=sys.stderr)
    sys.exit(1)


def wait(what, bound, probe):
    """Polls probe() until it returns something truthy, or fails after bound s."""
    end = time.monotonic() + bound
    while True:
        try:
            got = probe()
        except Exception:  # the page is still changing under us
            got = None
        if got:
            return got
        if time.monotonic() > end:
            fail(f"{what}: not within {bound} s")
        time.sleep(0.25)


def put_notebook(base, token):
    cells = [
        {"cell_type": "code", "source": src, "metadata": {}, "outputs": [], "execution_count": None}
        for src in CELLS
    ]
    body = {
        "type": "notebook",
        "format": "json",
        "content": {
            "cells": cells,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        },
    }
    req = urllib.request.Request(
        f"{base}/api/contents/{NOTEBOOK}",
        data=json.dumps(body).encode(),
        method="PUT",
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        if r.status not in (200, 201):
            fail(f"PUT {NOTEBOOK}: HTTP {r.status}")


def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1280,1100", "--hide-scrollbars"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=opts, service=Service(executable_path="/usr/bin/chromedriver"))


def console_errors(driver):
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def main():
    base, token, tb, out = sys.argv[1:5]
    os.makedirs(out, exist_ok=True)
    seconds = {}
    put_notebook(base, token)
    driver = browser()
    try:
        # 1. No token: the login page, never the Lab's shell.
        driver.get(f"{base}/lab")
        wait("the login page without a token", 30,
             lambda: driver.find_elements(By.CSS_SELECTOR, "input[type=password]"))
        without = "login page" if not driver.find_elements(By.ID, "jp-main-dock-panel") else "LAB LOADED"
        driver.get_log("browser")  # the login page's own 403s are expected

        # 2. With the token: the notebook, its kernel idle, then the cells.
        t0 = time.monotonic()
        driver.get(f"{base}/lab/tree/{NOTEBOOK}?token={token}")
        wait("the notebook's cells", 120,
             lambda: len(driver.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-CodeCell")) >= 3)
        wait("the kernel to be idle", 120,
             lambda: "Idle" in driver.find_element(By.CSS_SELECTOR, ".jp-StatusBar-Widget, #jp-main-statusbar").text
             or driver.find_elements(By.CSS_SELECTOR, ".jp-Notebook-ExecutionIndicator[data-status='idle']"))
        seconds["lab_to_idle_kernel"] = round(time.monotonic() - t0, 1)
        errors = console_errors(driver)
        cells = driver.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-CodeCell")
        t0 = time.monotonic()
        for i in range(len(CELLS)):
            prompt = lambda i=i: cells[i].find_element(By.CSS_SELECTOR, ".jp-InputPrompt").text.strip()
            # Shift+Enter in the cell's editor; sent again while the cell has
            # not even been queued (a key press the Lab swallowed while it was
            # still settling on a loaded machine: CI saw "[ ]:" for 300 s).
            end = time.monotonic() + 300
            while True:
                cells[i].find_element(By.CSS_SELECTOR, ".jp-InputArea-editor").click()
                ActionChains(driver).key_down(Keys.SHIFT).send_keys(Keys.ENTER).key_up(Keys.SHIFT).perform()
                sent = time.monotonic()
                while time.monotonic() - sent < 15 and prompt() in ("", "[ ]:"):
                    time.sleep(0.25)
                if prompt() not in ("", "[ ]:") or time.monotonic() > end:
                    break
            # The next cell once this one has its execution count.
            while "[*]" in prompt() or prompt() in ("", "[ ]:"):
                if time.monotonic() > end:
                    status = driver.find_element(By.ID, "jp-main-statusbar").text.replace("\n", " ")
                    fail(f"cell {i + 1} to run: not within 300 s (its prompt {prompt()!r}; status bar {status!r})")
                time.sleep(0.25)
        seconds["three_cells"] = round(time.monotonic() - t0, 1)
        outputs = [
            "\n".join(o.text for o in c.find_elements(By.CSS_SELECTOR, ".jp-OutputArea-output"))
            for c in cells[: len(CELLS)]
        ]
        # JupyterLab's "official Jupyter news?" toast covers the last lines: No.
        for b in driver.find_elements(By.XPATH, "//button[normalize-space()='No']"):
            b.click()
        # A taller window and the notebook from its top: the three cells' output.
        driver.set_window_size(1280, 1800)
        driver.execute_script(
            "for (const e of document.querySelectorAll('.jp-WindowedPanel-outer')) e.scrollTop = 0")
        time.sleep(1)
        driver.save_screenshot(os.path.join(out, "lab.png"))

        # 3. TensorBoard's scalars: the notebook's run among them.
        t0 = time.monotonic()
        driver.get(f"{tb}/#timeseries")
        wait("TensorBoard to show nb-run's train/loss", 90,
             # The card titles break the tag after its group: "train\n/loss".
             lambda: all(w in driver.find_element(By.TAG_NAME, "body").text for w in ("/loss", "nb-run")))
        seconds["tensorboard_loss"] = round(time.monotonic() - t0, 1)
        time.sleep(2)  # the charts draw after the tag list
        driver.save_screenshot(os.path.join(out, "tensorboard.png"))
        tensorboard = driver.find_element(By.TAG_NAME, "body").text
    finally:
        driver.quit()
    print(json.dumps({
        "cells": outputs,
        "console_errors": errors,
        "without_token": without,
        "tensorboard": tensorboard[:4000],
        "seconds": seconds,
    }))


if __name__ == "__main__":
    main()
