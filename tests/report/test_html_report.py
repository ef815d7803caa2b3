"""``fullgraph-report.html``: one file that loads nothing, holds every check, links break sites to the source of the
release that ran, and, opened in headless Chromium, filters its rows and counts them as the JSON does."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_fullgraph import report
from pytest_fullgraph.__main__ import main
from pytest_fullgraph.core.results import CheckResult, Mismatch, PrecisionVerdict
from pytest_fullgraph.publish.collate import collate
from pytest_fullgraph.report.html import HTML_NAME, html
from pytest_fullgraph.report.html_sites import source_roots, source_url
from tests import REPOSITORY
from tests.factories import GENERATION_UTILS, a_break, a_check

ENVIRONMENT = {"torch": "2.13.0+cpu", "transformers": "5.24.0", "backend": "aot_eager", "max_new_tokens": 4,
               "dtypes": ["float32"], "device": "cpu", "run_slow": False}
#: A message that would run a script if the page let a check's text out of its JSON.
INJECTION = "boom </script><script>window.injected = true</script><!-- <script> & done"


def small_report(*, baseline: bool = False) -> report.Report:
    """Every kind of row: a pass, breaks in transformers, torch and the standard library, a rounding mismatch and an
    error whose message tries to end the page's script. The baseline differs in each kind of change."""
    rounding = Mismatch(0, 9, 1, 5, 6, precision=PrecisionVerdict("rounding", "float32", 1.0, 1.0, 0.0, 1e-7, 1e-6))
    checks = [
        a_check("llama", "pass", "1 graph(s), tokens equal to eager", level="forward",
                timings={"eager_s": 0.5, "compile_s": 1.5}),
        a_check("llama", "pass" if baseline else "break", "Data-dependent branching", level="generate",
                breaks=(a_break(GENERATION_UTILS, 2413, "eos"),
                        a_break("torch/_dynamo/polyfills/__init__.py", 80, "generation"))),
        a_check("gemma", "mismatch", "tokens differ", scenario="sample", mismatch=rounding),
        a_check("gemma", "mismatch" if baseline else "error", INJECTION),
        a_check("gpt2", "break", "a user's break", scenario="eos", level="generate",
                breaks=(a_break("python3.X/copy.py", 10, "user"),)),
        a_check("gone" if baseline else "new", "pass", "", level="forward"),
    ]
    return report.Report(dict(ENVIRONMENT), checks)


def embedded(page: str, element_id: str) -> Any:
    found = re.search(rf'<script type="application/json" id="{element_id}">(.*?)</script>', page, re.DOTALL)
    assert found, element_id
    return json.loads(found.group(1))


def test_the_page_is_one_file_that_loads_nothing() -> None:
    page = html(small_report())
    assert not re.search(r"<script[^>]*\ssrc=", page) and not re.search(r"<(img|iframe|object|embed)\b", page)
    assert re.findall(r"<link[^>]*>", page) == ['<link rel="icon" href="data:,">']  # no favicon fetch either
    assert "@import" not in page and "url(" not in page and "@font-face" not in page
    assert "default-src 'none'" in page  # the browser itself refuses any fetch
    assert page.isascii()


def test_every_column_of_the_checks_table_has_its_width_but_the_message() -> None:
    """The fixed widths that keep a wide report within the window (the browser test measures it): a column without
    one would take the message's share; the message takes what the others leave."""
    page = html(small_report())
    table = page[page.index('<table id="checks">'):page.index("</thead>", page.index('<table id="checks">'))]
    names = re.findall(r'<col class="col-([a-z]+)">', table)
    assert len(names) == table.count("</th>") == 9
    selectors = " ".join(re.findall(r"([^{}]+)\{[^}]*\bwidth:", page))  # the style's rules that set a width
    assert {name for name in names if f".col-{name}" not in selectors} == {"message"}

def test_the_embedded_checks_are_the_reports() -> None:
    written = small_report()
    checks = [CheckResult.from_dict(item) for item in embedded(html(written), "fullgraph-checks")]
    assert sorted(checks, key=lambda result: result.key) == written.sorted_checks()


def test_a_message_cannot_end_the_script_it_is_in() -> None:
    page = html(small_report())
    assert page.count("<script") == 3  # the checks, the page's settings, the page's code
    assert "window.injected" in page and "<script>window.injected" not in page
    assert INJECTION in [item["message"] for item in embedded(page, "fullgraph-checks")]


def test_break_sites_link_to_the_source_of_the_release_that_ran() -> None:
    roots = source_roots(ENVIRONMENT)
    assert source_url("transformers/generation/utils.py", 2413, roots) == (
        "https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/generation/utils.py#L2413")
    assert source_url("torch/_dynamo/polyfills/__init__.py", 80, roots) == (
        "https://github.com/pytorch/pytorch/blob/v2.13.0/torch/_dynamo/polyfills/__init__.py#L80")
    assert source_url("python3.X/copy.py", 10, roots) == ""
    # a dev build has no tag: its lines would be guessed, so they are not linked
    assert source_roots({"torch": "2.14.0.dev20250601+cpu", "transformers": "5.25.0.dev0"}) == {}
    page = html(small_report())
    assert '<a href="https://github.com/pytorch/pytorch/blob/v2.13.0/torch/_dynamo/polyfills/__init__.py#L80">' in page
    assert "<td class=\"where\">python3.X/copy.py:10</td>" in page


def test_a_baseline_adds_what_changed() -> None:
    page = html(small_report(), small_report(baseline=True), baseline_name="baselines/fast.json")
    assert "Compared with baselines/fast.json" in page and "Changed checks per level" in page
    changes = embedded(page, "fullgraph-meta")["changes"]
    assert changes["llama-greedy-generate-float32"] == ["regression"]
    assert changes["new-greedy-forward-float32"] == ["new"] and changes["gone-greedy-forward-float32"] == ["missing"]
    assert '<select id="filter-change">' in page
    assert embedded(html(small_report()), "fullgraph-meta")["changes"] is None
    assert '<select id="filter-change">' not in html(small_report())


def test_a_report_without_checks_still_renders() -> None:
    page = html(report.Report(dict(ENVIRONMENT)))
    assert "0 checks" in page and embedded(page, "fullgraph-checks") == []


def test_not_a_number_does_not_break_the_page() -> None:
    written = small_report()
    written.checks[0].timings["odd_s"] = float("nan")
    data = re.search(r'id="fullgraph-checks">(.*?)</script>', html(written), re.DOTALL)
    assert data and json.loads(data.group(1), parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))


def test_write_merge_diff_and_collate_write_the_page(tmp_path: Path) -> None:
    written = report.write(small_report(baseline=True), tmp_path / "base")
    assert [path.name for path in written] == [report.JSON_NAME, report.MARKDOWN_NAME, HTML_NAME]
    report.write(small_report(), tmp_path / "current")
    assert main(["report", "merge", str(tmp_path / "current" / report.JSON_NAME), "-o", str(tmp_path / "m")]) == 0
    assert "Compared with" not in (tmp_path / "m" / HTML_NAME).read_text()
    baseline = str(tmp_path / "base" / report.JSON_NAME)
    assert main(["report", "diff", baseline, str(tmp_path / "m" / report.JSON_NAME), "--html",
                 str(tmp_path / "diff.html")]) == 1
    assert f"Compared with {baseline}" in (tmp_path / "diff.html").read_text()
    (tmp_path / "baselines").mkdir()
    shutil.copy(baseline, tmp_path / "baselines" / "fast-torch2.13.0.json")
    collated = collate([tmp_path / "m" / report.JSON_NAME], tmp_path / "out", tmp_path / "baselines")
    assert collated.failed
    assert "Compared with" in (tmp_path / "out" / "fast-torch2.13.0" / HTML_NAME).read_text()


NO_TORCH = """
import sys
sys.modules["torch"] = None  # every import of torch now fails
from pytest_fullgraph.report import load
from pytest_fullgraph.report.html import html
page = html(load(sys.argv[1]), load(sys.argv[2]))
assert "Compared with" in page and "<svg" in page
assert not [name for name, module in sys.modules.items()
            if module is not None and name.split(".")[0] in ("torch", "transformers")]
print("rendered without torch")
"""


def test_the_page_needs_no_torch() -> None:
    releases = REPOSITORY / "bench" / "reports" / "releases"
    current, baseline = (str(releases / release / "fullgraph-report.json.gz") for release in ("torch2.15.0",
                                                                                              "torch2.11.0"))
    completed = subprocess.run([sys.executable, "-c", NO_TORCH, current, baseline], capture_output=True, text=True,
                               check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "rendered without torch" in completed.stdout


# ---- in a real browser: headless Chromium driven by selenium, both from the machine, nothing downloaded ----

#: The names Chromium's binary goes by (Debian's package, Ubuntu's, Google's build).
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def _chromium() -> str | None:
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


def _why_no_browser() -> str:
    """Why the browser tests cannot run on this machine, or "" when they can."""
    missing = [name for name, found in (("chromium", _chromium()), ("chromedriver", shutil.which("chromedriver")))
               if not found]
    if missing:
        return (f"no {' or '.join(missing)} on PATH (Debian: apt-get install chromium chromium-driver); the page's "
                "filters are tested in headless Chromium")
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]'); the page's filters are tested through it"
    return ""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module, with the driver and browser this machine has: selenium's manager,
    which would download a driver it cannot find, is made to fail if it is ever asked."""
    reason = _why_no_browser()
    if reason:
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.selenium_manager import SeleniumManager

    def no_download(*args: object) -> dict[str, str]:
        raise AssertionError("selenium's manager was asked for a driver: nothing may be downloaded")

    options = webdriver.ChromeOptions()
    options.binary_location = str(_chromium())
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1000"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SeleniumManager, "binary_paths", no_download)
        driver = webdriver.Chrome(service=Service(executable_path=shutil.which("chromedriver")), options=options)
    yield driver
    driver.quit()


def open_page(driver: Any, path: Path) -> tuple[float, list[dict[str, Any]]]:
    """Load the page until its script has built the table: the seconds it took, and the console's errors."""
    started = time.perf_counter()
    driver.get(path.as_uri())
    deadline = started + 30
    while not driver.execute_script("return document.body.dataset.ready") and time.perf_counter() < deadline:
        time.sleep(0.02)
    seconds = time.perf_counter() - started
    return seconds, [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory, browser: Any) -> dict[str, Any]:
    """The committed 196-model matrix, merged as ``report merge`` does, its page open in the browser: the checks as
    the report's JSON has them, the load time and the console's errors."""
    paths = sorted((REPOSITORY / "bench" / "reports").glob("matrix-*.json.gz")) + sorted(
        (REPOSITORY / "bench" / "reports").glob("while-*.json.gz"))
    merged = report.merge((str(path), report.load(path)) for path in paths)
    page = tmp_path_factory.mktemp("matrix") / HTML_NAME
    page.write_text(html(merged))
    seconds, errors = open_page(browser, page)
    return {"checks": merged.to_dict()["checks"], "seconds": seconds, "errors": errors, "browser": browser}


def shown(driver: Any) -> tuple[int, int, dict[str, int]]:
    """Rows visible, the count the page says, and its count per outcome."""
    return driver.execute_script("""
        const counts = {};
        document.querySelectorAll("#shown-counts span").forEach((span) => {
            counts[span.dataset.outcome] = Number(span.dataset.count); });
        return [document.querySelectorAll("#checks tr.check:not([hidden])").length,
                Number(document.getElementById("visible").textContent), counts];""")


def choose(driver: Any, **values: str) -> None:
    """Show all, then pick each filter's value: the events a user's click and choice send (selenium's own click
    waits for the browser to paint 3,700 rows, a second a time); ``model`` is typed key by key."""
    from selenium.webdriver.common.by import By

    driver.execute_script('document.getElementById("filter-reset").click()')
    for name, value in values.items():
        if name == "model":
            driver.find_element(By.ID, "filter-model").send_keys(value)
        else:
            driver.execute_script("""const select = document.getElementById(arguments[0]);
                select.value = arguments[1];
                if (select.value !== arguments[1]) throw new Error(`no option ${arguments[1]}`);
                select.dispatchEvent(new Event("change"));""", f"filter-{name}", value)


def expect(driver: Any, checks: list[dict[str, Any]]) -> None:
    visible, said, per_outcome = shown(driver)
    assert visible == said == len(checks)
    assert per_outcome == dict(Counter(check["outcome"] for check in checks))


def origins(check: dict[str, Any]) -> set[str]:
    return {record["origin"] for record in check["breaks"] or ([check["first_break"]] if check["first_break"] else [])}


def test_the_matrix_loads_with_every_check_and_no_console_error(matrix: dict[str, Any]) -> None:
    """How long it takes is a benchmark's figure (docs/reports.md), not a test's: a loaded machine would fail it."""
    assert len(matrix["checks"]) > 3000
    assert matrix["errors"] == []
    expect(matrix["browser"], matrix["checks"])


def test_the_counts_table_matches_the_json(matrix: dict[str, Any]) -> None:
    cells = matrix["browser"].execute_script("""
        return [...document.querySelectorAll("#counts td[data-outcome]")].map(
            (cell) => [cell.dataset.level, cell.dataset.outcome, Number(cell.textContent)]);""")
    counted = Counter((check["level"], check["outcome"]) for check in matrix["checks"])
    totals = Counter(check["outcome"] for check in matrix["checks"])
    assert len(cells) > 10
    for level, outcome, count in cells:
        assert count == (counted[(level, outcome)] if level else totals[outcome]), (level, outcome)


@pytest.mark.parametrize(("name", "value"), [("outcome", "break"), ("outcome", "error"), ("level", "while"),
                                             ("scenario", "padded"), ("origin", "masking"), ("origin", "(none)")])
def test_a_filter_shows_exactly_its_checks(matrix: dict[str, Any], name: str, value: str) -> None:
    choose(matrix["browser"], **{name: value})
    if name == "origin":
        wanted = [check for check in matrix["checks"] if value in (origins(check) or {"(none)"})]
    else:
        wanted = [check for check in matrix["checks"] if check[name] == value]
    assert wanted
    expect(matrix["browser"], wanted)


def test_filters_combine_with_the_model_box(matrix: dict[str, Any]) -> None:
    choose(matrix["browser"], level="generate", outcome="break", model="Gemma")
    expect(matrix["browser"], [check for check in matrix["checks"] if check["level"] == "generate"
                               and check["outcome"] == "break" and "gemma" in check["model"]])
    choose(matrix["browser"])
    expect(matrix["browser"], matrix["checks"])


def test_the_matrix_fits_1400_px_and_its_headings_stick_below_the_filters(matrix: dict[str, Any]) -> None:
    """The 196-model page reads at 1400 px without sideways scrolling, and far down the table its column headings
    are still shown, just below the (sticky) filter bar and over the rows."""
    driver = matrix["browser"]
    choose(driver)
    viewport, width = driver.execute_script("return [window.innerWidth, document.documentElement.scrollWidth]")
    assert viewport == 1400 and width <= viewport
    driver.execute_script('document.querySelector("#checks tbody tr:nth-child(1500)").scrollIntoView()')
    filters_bottom, heading_top, on_top = driver.execute_script("""
        const bottom = document.getElementById("filters").getBoundingClientRect().bottom;
        const below = document.elementFromPoint(200, bottom + 5);
        return [bottom, document.querySelector("#checks thead tr").getBoundingClientRect().top,
                Boolean(below && below.closest("#checks thead"))];""")
    assert driver.execute_script("return window.scrollY") > 10000
    assert filters_bottom - 0.5 <= heading_top <= filters_bottom + 2
    assert on_top

def test_a_row_opens_its_breaks_and_the_change_filter_works(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    report.write(small_report(), tmp_path, baseline=small_report(baseline=True))
    _, errors = open_page(browser, tmp_path / HTML_NAME)
    assert errors == []
    assert browser.execute_script("return window.injected") is None
    assert INJECTION in browser.find_element(By.CSS_SELECTOR, "#checks td.headline[title^='boom']").get_attribute(
        "title")
    forward = browser.find_element(By.XPATH, "//tr[@class='check'][td[1]='llama'][td[3]='forward']")
    assert forward.find_elements(By.TAG_NAME, "td")[-1].text == "2.0 s"  # its phases' seconds, summed
    row = browser.find_element(By.XPATH, "//tr[@class='check'][td[1]='llama'][td[3]='generate']")
    row.click()
    links = [anchor.get_attribute("href") for anchor in row.find_elements(By.XPATH, "following-sibling::tr[1]//a")]
    assert ("https://github.com/huggingface/transformers/blob/v5.24.0/src/transformers/generation/utils.py#L2413"
            in links)
    choose(browser, change="regression")
    checks = small_report().checks
    expect(browser, [check.to_dict() for check in checks if check.model in ("llama", "gemma")
                     and check.outcome in ("break", "error")])
    choose(browser, outcome="mismatch")
    assert "mismatch (rounding)" in browser.find_element(By.CSS_SELECTOR, "tr.check:not([hidden]) .badge").text
