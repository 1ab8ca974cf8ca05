#!/usr/bin/env python3
"""The console in a real browser: headless Chromium driven through chromium-driver (WebDriver).

Run by ConsoleBrowserTests against a live stratus-api (and stratus-indexer) the test started; it
reads where everything is from the environment:

  CONSOLE_BASE_URL       e.g. http://127.0.0.1:PORT
  CONSOLE_LOGIN / CONSOLE_PASSWORD   an operator's credentials
  CONSOLE_CONTAINER / CONSOLE_USER   the container and the user whose private database is used
  CONSOLE_API_QUERY      ckAPIToken=…&ckWebAuthToken=… for that user, to read the API's sync
  CONSOLE_DEAD_LETTER    the id of a stratus-indexer dead letter to retry
  CONSOLE_ARTIFACTS      where screenshots go (one PNG per page)

Prints each step; exits 0 when every check held, 1 (with the reason) otherwise. SIGTERM ends the
browser and its driver before exiting, so a test that gives up leaves nothing running.
"""
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

BASE = os.environ["CONSOLE_BASE_URL"]
LOGIN = os.environ["CONSOLE_LOGIN"]
PASSWORD = os.environ["CONSOLE_PASSWORD"]
CONTAINER = os.environ["CONSOLE_CONTAINER"]
USER = os.environ["CONSOLE_USER"]
API_QUERY = os.environ["CONSOLE_API_QUERY"]
DEAD_LETTER = os.environ["CONSOLE_DEAD_LETTER"]
ARTIFACTS = os.environ["CONSOLE_ARTIFACTS"]
ZONE = "Console"


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


STARTED = time.monotonic()


def step(text):
    print(f"[console browser test] {time.monotonic() - STARTED:6.2f}s {text}", flush=True)


def on_term(signum, frame):
    raise SystemExit(f"stopped by signal {signum}")


def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("CONSOLE_CHROMIUM", "/usr/bin/chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1280,1000", "--no-first-run", "--disable-extensions"):
        options.add_argument(argument)
    service = Service(os.environ.get("CONSOLE_CHROMEDRIVER", "/usr/bin/chromedriver"))
    return webdriver.Chrome(service=service, options=options)


def shot(driver, name):
    path = os.path.join(ARTIFACTS, f"{name}.png")
    driver.save_screenshot(path)
    step(f"screenshot {path}")


def http(method, path, body=None, headers=None):
    """A request outside the browser: (status, text)."""
    request = urllib.request.Request(BASE + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def changes(sync_token):
    """records/changes of the zone through the API, as a device syncs."""
    body = {"zoneID": {"zoneName": ZONE}}
    if sync_token:
        body["syncToken"] = sync_token
    status, text = http("POST", f"/database/1/{CONTAINER}/development/private/records/changes?{API_QUERY}",
                        json.dumps(body).encode(), {"Content-Type": "application/json"})
    check(status == 200, f"records/changes answered {status}: {text[:500]}")
    reply = json.loads(text)
    return reply.get("records", []), reply["syncToken"]


def wait_for(driver, locator, timeout=20):
    def present(d):
        try:
            return while_in_document(lambda: d.find_element(*locator), False)
        except NoSuchElementException:
            return False
    return WebDriverWait(driver, timeout).until(present)


def through(driver, act, locator, timeout=20):
    """Acts (a click, an Enter) to leave the page, waits until the browser has left it, then for
    the next page's element: an element the old page also has is never mistaken for the new one."""
    old = driver.find_element(By.TAG_NAME, "html")
    act()
    WebDriverWait(driver, timeout).until(lambda _: gone(old))
    return wait_for(driver, locator, timeout)


def gone(element):
    """Whether an element has left the document (what `staleness_of` tells, but for both ways
    chromium-driver reports it)."""
    def still_there():
        element.is_enabled()
        return False
    return while_in_document(still_there, True)


def type_and_enter(driver, element, *keys):
    """Types into an element, then presses Enter as a keyboard does, on whatever has the focus: an
    Enter sent to the element itself can outlive the page it submits, and chromium-driver then
    fails the command because the element's node has left the document."""
    if keys:
        element.send_keys(*keys)
    else:
        element.click()  # the focus
    ActionChains(driver).send_keys(Keys.ENTER).perform()


def while_in_document(command, otherwise):
    """What `command` answers, or `otherwise` when it failed because its element's page was being
    replaced by the next one: chromium-driver says so as a stale element or, when the node goes
    while the command runs, as an inspector error."""
    try:
        return command()
    except WebDriverException as error:
        if isinstance(error, StaleElementReferenceException) or "does not belong to the document" in (error.msg or ""):
            return otherwise
        raise


def text_of(driver, locator=(By.TAG_NAME, "body")):
    """The text of an element (the page's body), or "" while the page is being replaced."""
    return while_in_document(lambda: driver.find_element(*locator).text, "")


def run(driver):
    wait = WebDriverWait(driver, 20)

    step("a wrong password is refused")
    driver.get(BASE + "/console")
    wait_for(driver, (By.ID, "login"))
    check(driver.current_url.endswith("/console/signin"), f"without a session /console went to {driver.current_url}")
    driver.find_element(By.ID, "login").send_keys(LOGIN)
    driver.find_element(By.ID, "password").send_keys("not the password")
    driver.find_element(By.ID, "signin").click()
    error = wait_for(driver, (By.ID, "signin-error"))
    check("wrong" in error.text, f"the failed sign-in said: {error.text}")
    check(not any(c["name"] == "stratus_console" for c in driver.get_cookies()), "a failed sign-in made a session")
    shot(driver, "01-signin-refused")

    step("a sign-in post without its CSRF token is refused")
    status, text = http("POST", "/console/signin", urllib.parse.urlencode({"login": LOGIN, "password": PASSWORD}).encode(),
                        {"Content-Type": "application/x-www-form-urlencoded"})
    check(status == 403 and "CSRF" in text, f"a CSRF-less sign-in got {status}")

    step("sign in with the keyboard only")
    login = driver.find_element(By.ID, "login")
    login.clear()
    through(driver, lambda: type_and_enter(driver, login, LOGIN, Keys.TAB, PASSWORD), (By.ID, "operator"))
    check(driver.find_element(By.ID, "operator").text == LOGIN, "the header does not name the operator")
    session = next((c for c in driver.get_cookies() if c["name"] == "stratus_console"), None)
    check(session is not None and session.get("httpOnly") and session.get("sameSite") == "Strict",
          f"the session cookie is not HttpOnly/SameSite=Strict: {session}")
    shot(driver, "02-containers")

    step("a form post without the session's CSRF token is refused")
    status, text = http("POST", "/console/zones",
                        urllib.parse.urlencode({"container": CONTAINER, "environment": "development", "database": "private",
                                                "user": USER, "zoneName": "Forged"}).encode(),
                        {"Content-Type": "application/x-www-form-urlencoded", "Cookie": f"stratus_console={session['value']}"})
    check(status == 403 and "CSRF" in text, f"a CSRF-less form post got {status}: {text[:300]}")

    step("pick container, environment and database")
    Select(through(driver, driver.find_element(By.LINK_TEXT, CONTAINER).click, (By.ID, "environment"))).select_by_value("development")
    Select(driver.find_element(By.ID, "database")).select_by_value("private")
    driver.find_element(By.ID, "user").send_keys(USER)
    shot(driver, "03-database")
    through(driver, driver.find_element(By.ID, "open-database").click, (By.ID, "zones"))

    step("create a zone")
    driver.find_element(By.ID, "zoneName").send_keys(ZONE)
    driver.find_element(By.ID, "create-zone").click()
    wait.until(lambda d: "The zone was created." in text_of(d))
    check("Forged" not in text_of(driver), "the forged zone exists")
    _, start = changes(None)

    step("create a record")
    driver.find_element(By.ID, "recordName").send_keys("note-1")
    driver.find_element(By.ID, "recordType").send_keys("Note")
    driver.find_element(By.ID, "fields").send_keys('{"title": {"value": "Written in a browser"}, "stars": {"value": 4}}')
    shot(driver, "04-records")
    driver.find_element(By.ID, "create-record").click()
    wait.until(lambda d: "The record was saved." in text_of(d))
    table = driver.find_element(By.ID, "fields-table").text
    check("title STRING" in table and "stars INT64" in table, f"the fields table shows: {table}")
    shot(driver, "05-record")
    records, after_create = changes(start)
    check([r["recordName"] for r in records] == ["note-1"], f"sync after create: {records}")
    check(records[0]["fields"]["title"]["value"] == "Written in a browser", f"sync after create: {records}")

    step("edit it, and see the change in the API's sync")
    fields = driver.find_element(By.ID, "fields")
    fields.clear()
    fields.send_keys('{"title": {"value": "Edited in a browser"}}')
    driver.find_element(By.ID, "save-record").click()
    wait.until(lambda d: "Edited in a browser" in text_of(d, (By.ID, "fields-table")))
    records, after_edit = changes(after_create)
    check(len(records) == 1 and records[0]["fields"]["title"]["value"] == "Edited in a browser", f"sync after edit: {records}")
    check(records[0]["fields"]["stars"]["value"] == 4, f"the edit kept the other field: {records}")

    step("look the record up by name")
    lookup = through(driver, driver.find_element(By.LINK_TEXT, ZONE).click, (By.ID, "lookup"))
    through(driver, lambda: type_and_enter(driver, lookup, "note-1"), (By.ID, "fields-table"))

    step("run a query with a filter and a sort")
    open_query = through(driver, driver.find_element(By.LINK_TEXT, ZONE).click, (By.ID, "open-query"))
    # The records page has a recordType field too: the query page's is the one after leaving it.
    through(driver, open_query.click, (By.ID, "recordType")).send_keys("Note")
    check("/console/query" in driver.current_url, f"the query button opened {driver.current_url}")
    driver.find_element(By.ID, "field").send_keys("title")
    Select(driver.find_element(By.ID, "comparator")).select_by_visible_text("BEGINS_WITH")
    driver.find_element(By.ID, "value").send_keys("Edited")
    driver.find_element(By.ID, "sort").send_keys("stars")
    Select(driver.find_element(By.ID, "order")).select_by_value("descending")
    through(driver, driver.find_element(By.ID, "run-query").click, (By.ID, "result-count"))
    deadline = time.monotonic() + 60
    while "1 records" not in driver.find_element(By.ID, "result-count").text:
        check(time.monotonic() < deadline, "the query never found the record (is stratus-indexer running?)")
        time.sleep(0.5)
        through(driver, driver.refresh, (By.ID, "result-count"))
    check("note-1" in driver.find_element(By.ID, "results").text, "the query result does not list note-1")
    shot(driver, "06-query")

    step("delete the record, and see the deletion in the API's sync")
    delete = through(driver, driver.find_element(By.LINK_TEXT, "note-1").click, (By.ID, "delete-record"))
    through(driver, delete.click, (By.TAG_NAME, "body"))
    wait.until(lambda d: "The record was deleted." in text_of(d))
    records, _ = changes(after_edit)
    check(len(records) == 1 and records[0].get("deleted") is True, f"sync after delete: {records}")

    step("view the workers' lag and retry a dead letter")
    driver.get(BASE + "/console")
    through(driver, wait_for(driver, (By.ID, "operations-link")).click, (By.ID, "worker-stratus-indexer"))
    wait_for(driver, (By.ID, "lag-chart"))
    check(driver.find_element(By.ID, f"dead-letter-{DEAD_LETTER}") is not None, "the dead letter is not listed")
    shot(driver, "07-operations")
    driver.find_element(By.ID, f"retry-{DEAD_LETTER}").click()
    wait.until(lambda d: "handed back to its worker" in text_of(d))
    check(not d_has(driver, f"dead-letter-{DEAD_LETTER}"), "the retried dead letter is still listed")
    # The indexer applies the zone again from the event log at its next reconciliation.
    deadline = time.monotonic() + 120
    while lag(driver) != "0":
        check(time.monotonic() < deadline, f"the indexer's lag stayed {lag(driver)} after the retry")
        time.sleep(2)
        driver.get(BASE + "/console/operations")
        wait_for(driver, (By.ID, "worker-stratus-indexer"))
    shot(driver, "08-operations-after-retry")

    step("start a reindex from the page and follow its progress to finished")
    Select(driver.find_element(By.ID, "run-job")).select_by_value("reindex")
    through(driver, driver.find_element(By.ID, "start-run").click, (By.ID, "run-state"))
    check("/console/operations/runs/" in driver.current_url, f"the start opened {driver.current_url}")
    # The page reloads itself while the run runs (no script of its own): a reload can replace the
    # document between finding an element and reading it, so the state is read in one script call
    # and a call that meets a reload is tried again.
    WebDriverWait(driver, 120, poll_frequency=0.5, ignored_exceptions=(StaleElementReferenceException, WebDriverException)).until(
        lambda d: run_state(d) in ("finished", "failed"))
    state = run_state(driver)
    check(state == "finished", f"the reindex ended {state}: {text_of(driver)[:500]}")
    position, target = driver.find_element(By.ID, "run-position").text, driver.find_element(By.ID, "run-target").text
    check(position == target and int(target) > 0, f"the finished reindex reached event {position} of {target}")
    shot(driver, "15-reindex")
    through(driver, driver.find_element(By.LINK_TEXT, "Back to operations").click, (By.ID, "runs"))
    check("finished" in driver.find_element(By.ID, "runs").text, "the operations page does not list the finished run")

    step("the recent errors, a container's access, a user's subscriptions")
    driver.get(BASE + "/console")
    search = through(driver, wait_for(driver, (By.ID, "errors-link")).click, (By.ID, "requestID"))
    through(driver, lambda: type_and_enter(driver, search), (By.ID, "errors"))
    check("requestID=" in driver.current_url, f"the search opened {driver.current_url}")
    check("/console/zones" in driver.find_element(By.ID, "errors").text, "the refused CSRF-less post is not among the recent errors")
    shot(driver, "10-errors")
    driver.get(BASE + "/console")
    access = through(driver, wait_for(driver, (By.LINK_TEXT, CONTAINER)).click, (By.ID, "access-link"))
    label = through(driver, access.click, (By.ID, "token-label"))
    token = through(driver, lambda: type_and_enter(driver, label, "browser test"), (By.ID, "new-token")).text
    check(len(token) == 64, f"the new API token is shown once: {token!r}")
    shot(driver, "11-access")
    driver.get(BASE + "/console")
    database = through(driver, wait_for(driver, (By.LINK_TEXT, CONTAINER)).click, (By.ID, "database"))
    Select(database).select_by_value("private")
    driver.find_element(By.ID, "user").send_keys(USER)
    subscriptions = through(driver, driver.find_element(By.ID, "open-database").click, (By.ID, "subscriptions-link"))
    through(driver, subscriptions.click, (By.ID, "subscriptions"))
    shot(driver, "12-subscriptions")

    step("a container's schema: the additive check, then the deploy to production")
    driver.get(BASE + "/console")
    schema = through(driver, wait_for(driver, (By.LINK_TEXT, CONTAINER)).click, (By.ID, "schema-link"))
    development = through(driver, schema.click, (By.ID, "schema-development"))
    check("Note" in development.text and "title" in development.text,
          f"development's schema does not show the saved record type: {development.text[:500]}")
    check("Not deployed yet" in driver.find_element(By.ID, "schema-production").text, "production is already deployed")
    through(driver, driver.find_element(By.ID, "check-deploy").click, (By.ID, "confirm"))
    added = driver.find_element(By.ID, "changes").text
    check("record type Note would be added" in added, f"the additive check said: {added}")
    shot(driver, "13-schema-deploy-check")
    through(driver, driver.find_element(By.ID, "confirm").click, (By.ID, "schema-production"))
    wait.until(lambda d: "deployed to production" in text_of(d))
    production = driver.find_element(By.ID, "schema-production").text
    check("Enforced" in production and "Note" in production, f"production after the deploy: {production[:500]}")
    check("RECORD TYPE Note" in driver.find_element(By.ID, "ckdb-production").text, "the production .ckdb text lacks Note")
    shot(driver, "14-schema")

    step("a container's allowed origins (CORS): the form, then the API's answer to a preflight")
    driver.get(BASE + "/console")
    origins = through(driver, wait_for(driver, (By.LINK_TEXT, CONTAINER)).click, (By.ID, "allowed-origins"))
    check(origins.get_attribute("value").strip() == "*", f"a new container allows any origin: {origins.get_attribute('value')!r}")
    origins.clear()
    origins.send_keys("https://notes.example.com", Keys.ENTER, "HTTP://LOCALHOST:3000")
    origins = through(driver, driver.find_element(By.ID, "change-origins").click, (By.ID, "allowed-origins"))
    check("allowed origins were changed" in text_of(driver), f"the change was not confirmed: {text_of(driver)[:500]}")
    listed = origins.get_attribute("value").split()
    check(listed == ["https://notes.example.com", "http://localhost:3000"], f"the form shows the origins as kept: {listed}")
    shot(driver, "17-origins")

    def preflight(origin):
        return http("OPTIONS", f"/database/1/{CONTAINER}/development/private/users/caller",
                    headers={"Origin": origin, "Access-Control-Request-Method": "POST"})[0]
    deadline = time.monotonic() + 20  # each API process keeps a container's origins 5 seconds
    while preflight("https://elsewhere.example") != 403:
        check(time.monotonic() < deadline, "a preflight from an unlisted origin is still allowed")
        time.sleep(0.2)
    check(preflight("https://notes.example.com") == 204, "a preflight from a listed origin is refused")

    step("the audit log: the deploy and the API token just made, filtered by action")
    driver.get(BASE + "/console")
    action = through(driver, wait_for(driver, (By.ID, "audit-link")).click, (By.ID, "audit-action"))
    entries = driver.find_element(By.ID, "audit").text
    check("schema.deploy" in entries and "token.create" in entries and "console.signin" in entries and "container.settings" in entries,
          f"the audit log lacks the console's actions: {entries[:500]}")
    Select(action).select_by_value("schema.deploy")
    through(driver, driver.find_element(By.ID, "search-audit").click, (By.ID, "audit"))
    filtered = driver.find_element(By.ID, "audit").text
    check("schema.deploy" in filtered and "token.create" not in filtered, f"the filtered audit log: {filtered[:500]}")
    shot(driver, "16-audit")

    step("a narrow screen")
    driver.set_window_size(390, 900)
    driver.get(BASE + "/console")
    wait_for(driver, (By.ID, "containers"))
    shot(driver, "09-narrow")

    step("sign out")
    through(driver, driver.find_element(By.XPATH, "//button[text()='Sign out']").click, (By.ID, "login"))
    driver.get(BASE + "/console")
    wait_for(driver, (By.ID, "login"))


def run_state(driver):
    return driver.execute_script("const e = document.getElementById('run-state'); return e ? e.textContent : '';")


def d_has(driver, element_id):
    return len(driver.find_elements(By.ID, element_id)) > 0


def lag(driver):
    return driver.find_element(By.CSS_SELECTOR, "#worker-stratus-indexer .lag").text


def main():
    signal.signal(signal.SIGTERM, on_term)
    os.makedirs(ARTIFACTS, exist_ok=True)
    driver = browser()
    try:
        run(driver)
    except Exception as error:  # noqa: BLE001 - every failure is reported with a screenshot
        try:
            shot(driver, "failure")
            step(f"page at failure: {driver.current_url}\n{text_of(driver)[:2000]}")
        except Exception:  # noqa: BLE001
            pass
        print(f"[console browser test] FAILED: {type(error).__name__}: {error}", flush=True)
        return 1
    finally:
        driver.quit()
    print("[console browser test] all checks held", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
