"""The dashboard over HTTPS in a real browser (headless Chromium): label integration.

A musterd on 0.0.0.0 serves TLS with its self-signed certificate. Chromium
trusts it as a user would make it: the certificate imported as a CA into the
profile's NSS database (certutil, libnss3-tools), with no flag at all; and,
for a machine without certutil, by the SPKI pin of exactly that key
(--ignore-certificate-errors-spki-list, a pin and not a blanket
--ignore-certificate-errors). Either way the login URL musterd printed opens,
the token leaves the address bar, the session cookie is Secure, the event
stream goes live, and a worker launched through the SDK appears and turns
running without a reload, with no error in the browser console.
"""
import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from dashboard_browser import Browser, available
from dashboard_common import write_project
from testutil import wait_for
from sdk_daemon import Daemon

pytestmark = pytest.mark.skipif(available() is not None, reason=str(available()))


def spki_pin(cert):
    """base64(SHA-256(SubjectPublicKeyInfo)): what Chromium's SPKI list takes."""
    pub = subprocess.run(["openssl", "x509", "-in", cert, "-noout", "-pubkey"], check=True, capture_output=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=pub, check=True,
                         capture_output=True).stdout
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    project = write_project(tmp_path_factory.mktemp("project"))
    with Daemon(project, tmp_path_factory.mktemp("state"), listen="0.0.0.0:0") as d:
        yield d


def daemon_cert(daemon):
    with open(os.path.join(daemon.state_dir, "musterd.json")) as f:
        return json.load(f)["tls"]["cert"]


@pytest.mark.skipif(shutil.which("certutil") is None, reason="certutil (libnss3-tools) is not installed")
def test_dashboard_over_https_with_the_certificate_imported_as_a_ca(daemon):
    home = tempfile.mkdtemp(prefix="muster-dash-home-")
    try:
        nssdb = os.path.join(home, ".pki", "nssdb")
        os.makedirs(nssdb)
        subprocess.run(["certutil", "-d", "sql:" + nssdb, "-N", "--empty-password"], check=True, capture_output=True)
        subprocess.run(["certutil", "-d", "sql:" + nssdb, "-A", "-t", "C,,", "-n", "musterd", "-i",
                        daemon_cert(daemon)], check=True, capture_output=True)
        use_the_dashboard(daemon, Browser(env=dict(os.environ, HOME=home)))
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_dashboard_over_https_with_the_pinned_certificate(daemon):
    use_the_dashboard(daemon, Browser(extra_args=["--ignore-certificate-errors-spki-list=" + spki_pin(
        daemon_cert(daemon))]))


def use_the_dashboard(daemon, browser):
    from selenium.webdriver.common.by import By
    assert daemon.url.startswith("https://")
    login = wait_for(lambda: re.search(r"musterd dashboard: (\S+)", daemon.log()), what="dashboard line").group(1)
    assert login.startswith("https://")
    try:
        d = browser.driver
        d.get(login)
        wait_for(lambda: "token=" not in d.current_url, what="the token to leave the URL")
        assert d.current_url == daemon.url + "/"
        [cookie] = [c for c in d.get_cookies() if c["name"].startswith("muster_session")]
        assert cookie["httpOnly"] and cookie["secure"]
        wait_for(lambda: d.find_elements(By.CSS_SELECTOR, "#conn") and
                 d.find_element(By.CSS_SELECTOR, "#conn").text == "live", what="the event stream over https")
        client = daemon.client()
        [w] = client.launch_workers(n=1, cpu=0.1, memory=0.1, script="sleep.py")
        try:
            wait_for(lambda: d.execute_script(
                "const e = document.querySelector('tr[data-id=\"' + arguments[0] + '\"] .status');"
                "return e ? e.textContent : null;", w["id"]) == "running", timeout=20, what="the worker running")
        finally:
            client.stop_workers(w["id"])
        assert browser.errors() == []
    finally:
        browser.close()


def test_an_unpinned_browser_gets_no_page(daemon):
    """Without the pin Chromium refuses the self-signed certificate: nothing is served around it."""
    browser = Browser()
    try:
        d = browser.driver
        d.get(daemon.url + "/")
        assert "muster" not in (d.title or "").lower()
        assert not d.find_elements("css selector", "#workers")
    finally:
        browser.close()
