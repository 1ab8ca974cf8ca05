#!/usr/bin/env python3
"""A web app signing in through the hosted sign-in page, in a real browser: headless Chromium driven
through chromium-driver (WebDriver), as scripts/console_browser_test.py drives the console.

Run by WebSignInBrowserTests against a live stratus-api the test started. This script serves the
app's page and, under the same origin, passes /database/ and /auth/ through to stratus-api (as a
deployment's reverse proxy would). The page calls users/caller, is answered 421 with redirectURL,
opens it in a window on a click, and waits for the window to post the web auth token back; then it
calls users/caller with the token. Then it signs in again through the trusted issuer's button,
calling stratus-api directly on its own port this time (another origin: CORS): the hosted page
sends the window to the test's OpenID provider, which posts a signed ID token back to Stratus's
callback, whose page hands the token to the app. Last, it signs in through a second issuer's button,
which uses the authorization-code flow with PKCE: the provider sends the window back to Stratus's
callback with a code, which Stratus exchanges at the provider's token endpoint. Settings from the
environment:

  WEB_API_URL        stratus-api, e.g. http://127.0.0.1:PORT
  WEB_APP_PORT       the port this script serves the app on (stratus-api's STRATUS_PUBLIC_URL)
  WEB_CONTAINER / WEB_API_TOKEN   the container and its API token
  WEB_LOGIN / WEB_PASSWORD / WEB_USER   a user's credentials and user record name
  WEB_PROVIDER_LABEL the label of the trusted issuer's button on the hosted page
  WEB_CODE_PROVIDER_LABEL  the label of the button of the issuer with a token endpoint (the code flow)

Prints each step; exits 0 when every check held, 1 (with the reason) otherwise. SIGTERM ends the
browser and its driver before exiting.
"""
import http.server
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

API = os.environ["WEB_API_URL"]
PORT = int(os.environ["WEB_APP_PORT"])
CONTAINER = os.environ["WEB_CONTAINER"]
API_TOKEN = os.environ["WEB_API_TOKEN"]
LOGIN = os.environ["WEB_LOGIN"]
PASSWORD = os.environ["WEB_PASSWORD"]
USER = os.environ["WEB_USER"]
PROVIDER_LABEL = os.environ["WEB_PROVIDER_LABEL"]
CODE_PROVIDER_LABEL = os.environ["WEB_CODE_PROVIDER_LABEL"]
APP = f"http://127.0.0.1:{PORT}"
STARTED = time.monotonic()

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>A web app</title></head><body>
<button id="signin" disabled>Sign in</button>
<button id="direct">Sign in, calling the API on its own origin</button>
<p id="state">starting</p>
<p id="user"></p>
<script>
const settings = SETTINGS;
let redirectURL = null;
let direct = false;
async function caller(token) {
  let url = (direct ? settings.api : '') + '/database/1/' + encodeURIComponent(settings.container) + '/development/private/users/caller?ckAPIToken=' + encodeURIComponent(settings.apiToken);
  if (token) { url += '&ckWebAuthToken=' + encodeURIComponent(token); }
  const response = await fetch(url);
  return [response.status, await response.json()];
}
window.addEventListener('message', async (event) => {
  if (event.origin !== window.location.origin || !event.data || !event.data.ckWebAuthToken) { return; }
  document.getElementById('state').textContent = 'token received';
  const [status, body] = await caller(event.data.ckWebAuthToken);
  document.getElementById('user').textContent = status === 200 ? body.userRecordName : ('error ' + status + ' ' + JSON.stringify(body));
});
caller(null).then(([status, body]) => {
  redirectURL = body.redirectURL || null;
  document.getElementById('state').textContent = status + ' ' + (redirectURL || 'without redirectURL');
  document.getElementById('signin').disabled = !redirectURL;
});
document.getElementById('signin').addEventListener('click', () => window.open(redirectURL, 'stratus-sign-in', 'width=480,height=640'));
document.getElementById('direct').addEventListener('click', async () => {
  direct = true;
  document.getElementById('user').textContent = '';
  try {
    const [status, body] = await caller(null);
    document.getElementById('state').textContent = 'direct ' + status + ' ' + (body.redirectURL || 'without redirectURL');
    if (body.redirectURL) { window.open(body.redirectURL, 'stratus-sign-in', 'width=480,height=640'); }
  } catch (error) {
    document.getElementById('state').textContent = 'direct call failed: ' + error;
  }
});
</script></body></html>
"""


class KeepRedirects(urllib.request.HTTPRedirectHandler):
    """Hands a redirect to the browser, as a reverse proxy does, instead of following it."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: PLR0913 - the base class's signature
        return None


NO_REDIRECTS = urllib.request.build_opener(KeepRedirects)


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def step(text):
    print(f"[web sign-in browser test] {time.monotonic() - STARTED:6.2f}s {text}", flush=True)


def on_term(signum, frame):
    raise SystemExit(f"stopped by signal {signum}")


class AppAndProxy(http.server.BaseHTTPRequestHandler):
    """The app's page at /app; /database/ and /auth/ passed through to stratus-api."""

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path == "/app":
            body = PAGE.replace("SETTINGS", json.dumps({"container": CONTAINER, "apiToken": API_TOKEN, "api": API}).replace("<", "\\u003c")).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.forward()

    def do_POST(self):  # noqa: N802
        self.forward()

    def forward(self):
        if not (self.path.startswith("/database/") or self.path.startswith("/auth/")):
            self.send_error(404)
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {name: self.headers[name] for name in ("Content-Type", "Origin") if self.headers.get(name)}
        headers["Host"] = f"127.0.0.1:{PORT}"
        request = urllib.request.Request(API + self.path, data=body, method=self.command, headers=headers)
        try:
            with NO_REDIRECTS.open(request, timeout=30) as response:
                status, answer, reply_headers = response.status, response.read(), response.headers
        except urllib.error.HTTPError as error:
            status, answer, reply_headers = error.code, error.read(), error.headers
        self.send_response(status)
        for name in ("Content-Type", "Content-Security-Policy", "Cache-Control", "Referrer-Policy", "Location"):
            if reply_headers.get(name):
                self.send_header(name, reply_headers[name])
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("CONSOLE_CHROMIUM", "/usr/bin/chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1000,800", "--no-first-run", "--disable-extensions", "--disable-popup-blocking"):
        options.add_argument(argument)
    service = Service(os.environ.get("CONSOLE_CHROMEDRIVER", "/usr/bin/chromedriver"))
    return webdriver.Chrome(service=service, options=options)


def run(driver):
    wait = WebDriverWait(driver, 30)
    driver.get(f"{APP}/app")
    wait.until(lambda d: d.find_element(By.ID, "state").text != "starting")
    state = driver.find_element(By.ID, "state").text
    step(f"the app's first call: {state[:200]}")
    check(state.startswith(f"421 {APP}/auth/1/{CONTAINER}/signin/page?request="), f"421 with the hosted page's absolute address: {state}")
    check(API_TOKEN not in state, "no API token in redirectURL")
    app_window = driver.current_window_handle
    driver.find_element(By.ID, "signin").click()
    wait.until(lambda d: len(d.window_handles) == 2)
    driver.switch_to.window(next(handle for handle in driver.window_handles if handle != app_window))
    wait.until(lambda d: d.find_element(By.ID, "signin").is_displayed())
    step(f"the sign-in page: {driver.find_element(By.TAG_NAME, 'body').text[:300]!r}")
    check(CONTAINER in driver.find_element(By.ID, "container").text, "the page names the container")
    driver.find_element(By.ID, "login").send_keys(LOGIN)
    driver.find_element(By.ID, "password").send_keys("not the password")
    driver.find_element(By.ID, "signin-button").click()
    wait.until(lambda d: "wrong" in d.find_element(By.ID, "status").text)
    step(f"a wrong password: {driver.find_element(By.ID, 'status').text!r}")
    driver.find_element(By.ID, "password").clear()
    driver.find_element(By.ID, "password").send_keys(PASSWORD)
    driver.find_element(By.ID, "signin-button").click()
    wait.until(lambda d: len(d.window_handles) == 1)
    step("the sign-in window closed")
    driver.switch_to.window(app_window)
    wait.until(lambda d: d.find_element(By.ID, "user").text != "")
    user = driver.find_element(By.ID, "user").text
    step(f"the app's call with the token it was handed: {user!r}")
    check(user == USER, f"users/caller with the handed token names {USER}, not {user!r}")

    # Again through the trusted issuer, calling stratus-api on its own origin (CORS).
    provider_user = provider_sign_in(driver, wait, app_window, PROVIDER_LABEL)
    check(provider_user.startswith("_") and provider_user != USER, f"users/caller names the provider account's new user, not {provider_user!r}")
    print(f"[web sign-in browser test] provider user {provider_user}", flush=True)

    # And through the issuer with a token endpoint: the authorization-code flow with PKCE.
    code_user = provider_sign_in(driver, wait, app_window, CODE_PROVIDER_LABEL)
    check(code_user.startswith("_") and code_user not in (USER, provider_user), f"users/caller names the code flow account's new user, not {code_user!r}")
    print(f"[web sign-in browser test] code flow user {code_user}", flush=True)


def provider_sign_in(driver, wait, app_window, label):
    """Opens the hosted page from the app (calling stratus-api on its own origin), clicks the
    button saying `label`, waits for the window to hand the token back and close, and returns the
    user record name the app's call with that token names."""
    driver.find_element(By.ID, "direct").click()
    wait.until(lambda d: len(d.window_handles) == 2 or d.find_element(By.ID, "state").text.startswith("direct call failed"))
    state = driver.find_element(By.ID, "state").text
    step(f"the app's direct call: {state[:200]}")
    check(state.startswith(f"direct 421 {APP}/auth/1/{CONTAINER}/signin/page?request="), f"a cross-origin call reads the 421 and its redirectURL: {state}")
    driver.switch_to.window(next(handle for handle in driver.window_handles if handle != app_window))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "a.provider"))
    labels = [element.text for element in driver.find_elements(By.CSS_SELECTOR, "a.provider")]
    step(f"the providers' buttons: {labels!r}")
    buttons = [element for element in driver.find_elements(By.CSS_SELECTOR, "a.provider") if element.text == label]
    check(len(buttons) == 1, f"one button says {label!r}: {labels!r}")
    buttons[0].click()
    wait.until(lambda d: len(d.window_handles) == 1)
    step(f"the sign-in window closed after the answer to {label!r}")
    driver.switch_to.window(app_window)
    wait.until(lambda d: d.find_element(By.ID, "user").text != "")
    user = driver.find_element(By.ID, "user").text
    step(f"the app's direct call with the token {label!r} handed: {user!r}")
    return user


def main():
    signal.signal(signal.SIGTERM, on_term)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", PORT), AppAndProxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    driver = browser()
    try:
        run(driver)
    except Exception as error:  # noqa: BLE001 - every failure is reported
        try:
            step(f"page at failure: {driver.current_url}\n{driver.find_element(By.TAG_NAME, 'body').text[:2000]}")
        except Exception:  # noqa: BLE001
            pass
        print(f"[web sign-in browser test] FAILED: {type(error).__name__}: {error}", flush=True)
        return 1
    finally:
        driver.quit()
        server.shutdown()
    print("[web sign-in browser test] all checks held", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
