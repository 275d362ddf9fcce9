"""Headless Chromium (Debian's chromium + chromedriver, python3-selenium) for the dashboard
tests and the screenshot script: a fresh profile per browser, the browser log captured."""
import os
import shutil
import tempfile

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def available():
    """None when the browser can run here, else why not."""
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        return "chromium and chromium-driver are not installed"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "python3-selenium is not installed"
    return None


class Browser:
    """`extra_args`: more Chromium switches (e.g. --ignore-certificate-errors-spki-list=<pin>);
    `env`: chromedriver's and Chromium's environment (e.g. a HOME whose ~/.pki/nssdb trusts a CA)."""

    def __init__(self, width=1400, height=1000, extra_args=(), env=None):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        self.profile = tempfile.mkdtemp(prefix="muster-dash-chromium-")
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--no-first-run", "--user-data-dir=" + self.profile, "--window-size=%d,%d" % (width, height),
                    *extra_args):
            opts.add_argument(arg)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(service=Service(CHROMEDRIVER, env=env), options=opts)
        self.driver.set_page_load_timeout(30)

    def errors(self):
        """SEVERE entries of the browser console (errors, CSP violations, failed loads)."""
        return [e for e in self.driver.get_log("browser") if e.get("level") == "SEVERE"]

    def close(self):
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)
