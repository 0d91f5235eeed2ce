"""Open the gallery in a real headless Chromium and report what a reader would see broken.

>>> report = check_page("figures/index.html", screenshot="build/gallery.png")
>>> report.ok, report.broken_images, report.broken_links, report.console_errors

Chromium is Debian's ``chromium`` package (``make browser`` installs it where apt can run); Playwright drives it
through its ``executable_path`` -- no browser is downloaded. Started with the flags this offline machine needs (no
background networking, no sync, no component updates), so any console error is the page's own.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@dataclass
class PageReport:
    url: str
    images: int = 0
    links: int = 0
    broken_images: list[str] = field(default_factory=list)  # src of every <img> whose naturalWidth is 0
    broken_links: list[str] = field(default_factory=list)  # hrefs to a missing file or a missing #anchor
    console_errors: list[str] = field(default_factory=list)  # console "error" messages and uncaught page errors
    screenshot: Path | None = None

    @property
    def ok(self) -> bool:
        return not (self.broken_images or self.broken_links or self.console_errors)


def chromium_path() -> str | None:
    """``$CHROMIUM`` if set, else ``chromium`` / ``chromium-browser`` on PATH (None when absent)."""
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


def why_unavailable() -> str | None:
    """None when a browser check can run here, else the one-line reason (for a test's skip)."""
    if chromium_path() is None:
        return "no Chromium here: `make browser` installs Debian's chromium (needs apt and root)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed: `make setup` installs the dev dependencies"
    return None


def _link_target_ok(href: str, page_path: Path, anchors: set[str]) -> bool:
    """A relative or file: link must name an existing file; ``#x`` an element with id x; other schemes are not
    followed (nothing leaves this machine)."""
    parsed = urlparse(href)
    if parsed.scheme in ("http", "https", "mailto"):
        return True
    if parsed.scheme == "file":
        target = Path(unquote(parsed.path))
        same_page = target == page_path
    else:
        target = (page_path.parent / unquote(parsed.path)).resolve() if parsed.path else page_path
        same_page = not parsed.path
    if same_page and parsed.fragment:
        return parsed.fragment in anchors
    return target.exists()


def _page_to_open(path: str | Path) -> Path:
    """The page's absolute path, once Chromium can run and the page exists (else one line saying what to do)."""
    reason = why_unavailable()
    if reason:
        raise RuntimeError(reason)
    page_path = Path(path).resolve()
    if not page_path.exists():
        raise FileNotFoundError(f"{page_path} does not exist: build it with `python -m sinklib gallery`")
    return page_path


def check_page(path: str | Path, screenshot: str | Path | None = None, timeout_ms: int = 60_000) -> PageReport:
    """Load ``path`` (an HTML file) in headless Chromium; check every image decoded, every link resolves and no
    console error was logged; save a full-page screenshot when asked."""
    from playwright.sync_api import sync_playwright

    page_path = _page_to_open(path)
    report = PageReport(url=page_path.as_uri())
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: report.console_errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: report.console_errors.append(f"uncaught: {e}"))
            page.goto(report.url, wait_until="load", timeout=timeout_ms)
            images = page.eval_on_selector_all(
                "img", "els => els.map(e => [e.getAttribute('src'), e.complete && e.naturalWidth > 0])")
            hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
            anchors = set(page.eval_on_selector_all("[id]", "els => els.map(e => e.id)"))
            report.images, report.links = len(images), len(hrefs)
            report.broken_images = [src for src, loaded in images if not loaded]
            report.broken_links = [h for h in hrefs if not _link_target_ok(h, page_path, anchors)]
            if screenshot:
                report.screenshot = Path(screenshot)
                report.screenshot.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(report.screenshot), full_page=True)
        finally:
            browser.close()
    return report


# How a reader sees the gallery (issue 46): each found the same way on any version of the page, by what it says.
_SUMMARY_JS = "() => document.querySelector('#scorecard p')"  # the scorecard's first paragraph: its counts
_PER_PAPER_XPATH = "//*[@id='scorecard']//h3[starts-with(normalize-space(.), 'Per paper')]/following::table[1]"
_CLAIMS_TABLE_JS = """() => [...document.querySelectorAll('#scorecard table')].find(
    t => [...t.querySelectorAll('th')].some(th => /caveat/i.test(th.textContent))) || null"""
# every cell under a header that says "caveat" or "note", in every table: [text, clipped inside, past the window]
_CAVEATS_JS = """() => {
  const out = [];
  for (const table of document.querySelectorAll('table')) {
    const heads = [...table.querySelectorAll('thead th, tr:first-child th')];
    const cols = heads.map((th, i) => /caveat|\\bnote\\b/i.test(th.textContent) ? i : -1).filter(i => i >= 0);
    for (const row of table.querySelectorAll('tbody tr'))
      for (const i of cols) {
        const cell = row.children[i];
        if (!cell || !cell.textContent.trim()) continue;
        out.push([cell.textContent.trim().slice(0, 80), cell.scrollWidth > cell.clientWidth + 1,
                  cell.getBoundingClientRect().right > document.documentElement.clientWidth + 1]);
      }
  }
  return out;
}"""
_RAW_TEX = r"\$[^$\n]{0,80}\\[A-Za-z]+"  # a dollar, then a TeX command before the next dollar: unrendered math


@dataclass
class ReadingReport:
    """What a reader of the gallery sees in a ``width`` x ``height`` window (:func:`reading_report`)."""

    url: str
    width: int
    height: int
    scroll_width: int = 0  # the page's width with every <details> open: > width means horizontal scrolling
    off_first_screen: list[str] = field(default_factory=list)  # of "what we found", "start line", "summary",
    # "per-paper table": missing, or not wholly on the first screen
    caveats: int = 0  # cells under a "caveat" / "note" header, every <details> open
    clipped_caveats: list[str] = field(default_factory=list)  # such cells cut off inside, or reaching past the window
    claims_hidden_at_first: bool = False  # the scorecard's every-claim table is not shown when the page opens
    claims_shown_after_click: bool = False  # ... and is after one click on what hides it
    math_elements: int = 0  # <svg class="math"> and <math> elements
    raw_tex: list[str] = field(default_factory=list)  # "$\\alpha..." still in the text a reader sees
    external_requests: list[str] = field(default_factory=list)  # every request to anything but file: / data:
    screenshot: Path | None = None  # the first screen

    @property
    def ok(self) -> bool:
        return (self.scroll_width <= self.width and not self.off_first_screen and not self.clipped_caveats
                and self.claims_hidden_at_first and self.claims_shown_after_click and not self.raw_tex
                and not self.external_requests)


def reading_report(path: str | Path, width: int = 1400, height: int = 900, screenshot: str | Path | None = None,
                   timeout_ms: int = 60_000) -> ReadingReport:
    """Open the gallery at ``path`` in headless Chromium in a ``width`` x ``height`` window and measure what a reader
    sees: whether what the run found, the start-here line, the scorecard's summary and per-paper table lie wholly on
    the first screen (their boxes within
    ``[0, width] x [0, height]``), whether the every-claim table is hidden until one click on the ``<summary>`` that
    hides it, and -- with every ``<details>`` open -- the page's ``scrollWidth`` and every caveat cell (``scrollWidth
    <= clientWidth`` and its right edge inside the window); the math elements, any ``$\\command`` left in the visible
    text, and every request that is not to ``file:``/``data:`` (each aborted: nothing leaves the machine). Saves the
    first screen as ``screenshot`` when asked."""
    import re

    from playwright.sync_api import sync_playwright

    page_path = _page_to_open(path)
    report = ReadingReport(url=page_path.as_uri(), width=width, height=height)

    def leaves(url: str) -> bool:
        return not url.startswith(("file:", "data:", "about:", "blob:"))

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.on("request", lambda r: report.external_requests.append(r.url) if leaves(r.url) else None)
            page.route(re.compile(r"^(?!file:|data:|about:|blob:)"), lambda route: route.abort())
            page.goto(report.url, wait_until="load", timeout=timeout_ms)
            def first(selector: str):
                return page.locator(selector).first.element_handle() if page.locator(selector).count() else None

            for name, box in (("what we found", first("#found")), ("start line", first("p.start")),
                              ("summary", page.evaluate_handle(_SUMMARY_JS).as_element()),
                              ("per-paper table", page.locator(f"xpath={_PER_PAPER_XPATH}").element_handle()
                               if page.locator(f"xpath={_PER_PAPER_XPATH}").count() else None)):
                rect = box.bounding_box() if box else None
                if not rect or rect["y"] < 0 or rect["y"] + rect["height"] > height or rect["x"] + rect["width"] > width:
                    report.off_first_screen.append(name)
            if screenshot:
                report.screenshot = Path(screenshot)
                report.screenshot.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(report.screenshot))
            claims = page.evaluate_handle(_CLAIMS_TABLE_JS).as_element()
            if claims is not None:
                report.claims_hidden_at_first = not claims.is_visible()
                opener = claims.evaluate_handle("t => t.closest('details')?.querySelector(':scope > summary') || null")
                if opener.as_element() is not None:
                    opener.as_element().click()
                report.claims_shown_after_click = claims.is_visible()
            page.evaluate("() => document.querySelectorAll('details').forEach(d => d.open = true)")
            report.scroll_width = page.evaluate("() => document.documentElement.scrollWidth")
            cells = page.evaluate(_CAVEATS_JS)
            report.caveats = len(cells)
            report.clipped_caveats = [text for text, clipped, past in cells if clipped or past]
            report.math_elements = page.locator("svg.math, math").count()
            report.raw_tex = re.findall(_RAW_TEX, page.inner_text("body"))
        finally:
            browser.close()
    return report


MODEL_NOT_FOUND = "Error displaying widget: model not found"


@dataclass
class LabReport:
    """What a JupyterLab session showed after running a notebook: widget sliders, images in outputs, errors."""

    sliders: int = 0
    images: int = 0
    errors: list[str] = field(default_factory=list)  # error outputs in the notebook and uncaught page errors
    dialogs: list[str] = field(default_factory=list)  # dialogs that opened while running (accepted)
    reruns: int = 0  # page reloaded and Run All sent again after "model not found" on a first launch (at most once)
    screenshot: Path | None = None

    @property
    def ok(self) -> bool:
        return self.sliders > 0 and self.images > 0 and not self.errors


def lab_screenshot(notebook: str | Path, screenshot: str | Path, timeout_s: float = 240.0,
                   port: int = 8893) -> LabReport:
    """Start JupyterLab on ``notebook``'s folder (no browser, a fixed token, this interpreter's kernel), open the
    notebook in headless Chromium, run every cell, wait for a widget slider and a figure, save a screenshot.

    Used to show the attention explorer as a student sees it; a notebook error or a missing widget is reported. The
    notebook's kernel starts without the "Select Kernel" dialog, and the cells run once the page has loaded its
    extensions (the widget manager among them).
    """
    import json
    import shutil
    import subprocess
    import sys
    import tempfile
    import urllib.request

    from playwright.sync_api import sync_playwright

    notebook = Path(notebook).resolve()
    token = "sinklib"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("SINKLIB_HEADLESS", None)
    env.pop("MPLBACKEND", None)  # the kernel's own default (inline), as a student's JupyterLab has
    settings = Path(tempfile.mkdtemp(prefix="sinklib-lab-"))  # fresh user settings: no news question in the shot
    news = settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    # Start the notebook's own kernel (python3) without the "Select Kernel" dialog: on a fresh clone the dialog was
    # answered before the kernel list had loaded and the cells never ran (CI, stop 34).
    tracker = settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text(json.dumps({"autoStartDefaultKernel": True}))
    env["JUPYTERLAB_SETTINGS_DIR"] = str(settings)
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", f"--ServerApp.token={token}",
         "--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={notebook.parent}", "--allow-root",
         "--LabApp.news_url=", "--LabServerApp.announcements_url="],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    report = LabReport()
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(120):  # the server takes a few seconds to start
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("pageerror", lambda err: report.errors.append(f"page error: {err}"))
            page.goto(f"{base}/lab/tree/{notebook.name}?token={token}", timeout=timeout_s * 1000)
            _wait_until_loaded(page, timeout_s)
            _run_all_and_wait(page, report, timeout_s)
            if page.locator(f":text('{MODEL_NOT_FOUND}')").count():  # the first launch of a fresh install can still
                # lose that race (a fresh clone in CI, 2 cores; a second Run All on the same page failed again):
                # reload the page, as a person would, so a new widget manager connects to the kernel, and run the
                # cells once more; a second failure stays a failure
                report.reruns += 1
                page.on("dialog", _leave_unsaved)
                page.reload(timeout=timeout_s * 1000)
                _wait_until_loaded(page, timeout_s)
                _run_all_and_wait(page, report, timeout_s)
            report.errors += [t[:300] for t in page.locator(".jp-RenderedText[data-mime-type="
                                                             "'application/vnd.jupyter.stderr']").all_inner_texts()
                              if "Error" in t]
            report.errors += [MODEL_NOT_FOUND] * page.locator(f":text('{MODEL_NOT_FOUND}')").count()
            time.sleep(1.0)
            out = Path(screenshot)
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out), full_page=True)
            report.screenshot = out
            browser.close()
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(settings, ignore_errors=True)
    return report


def _leave_unsaved(dialog) -> None:
    """Accept "leave this page?" (the notebook has unsaved outputs) so a reload goes ahead; dismiss any other dialog,
    as Playwright does with no handler (a handler that answers nothing would freeze the page)."""
    if dialog.type == "beforeunload":
        dialog.accept()
    else:
        dialog.dismiss()


def _wait_until_loaded(page, timeout_s: float) -> None:
    """Wait for the notebook, an idle kernel and the end of the page's requests: a Run All sent before the widget
    manager is there shows "Error displaying widget: model not found" (jupyterlab/jupyterlab#6849)."""
    page.wait_for_selector(".jp-Notebook", timeout=timeout_s * 1000)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=timeout_s * 1000)
    page.wait_for_load_state("networkidle", timeout=timeout_s * 1000)


_PROMPT_TEXTS = "[...document.querySelectorAll('.jp-InputPrompt')].map(p => p.textContent.trim())"  # "[3]:", "[*]:"
_PROMPTS = f"() => {_PROMPT_TEXTS}"
_BUSY = f"() => {_PROMPT_TEXTS}.some(t => /\\[\\*\\]/.test(t))"  # a cell is running
# True once a cell runs or has run since ``before`` (the prompts' texts then): a prompt reads "[*]", or a numbered
# prompt differs from what it was -- so a second Run All waits for its own run, not the first one's output.
_RAN_SINCE = (f"before => {_PROMPT_TEXTS}"
              ".some((t, i) => /\\[\\*\\]/.test(t) || (/\\[\\d+\\]/.test(t) && t !== before[i]))")


def _run_all_and_wait(page, report: LabReport, timeout_s: float) -> None:
    """Run All Cells from the Run menu (asked again until a cell starts: a kernel still connecting drops the request),
    then wait until the widget's sliders and images show, or the cells have finished with an error; the counts go
    into ``report``."""
    before = page.evaluate(_PROMPTS)
    asking_until = time.time() + timeout_s
    while time.time() < asking_until:  # a kernel still connecting drops the request: ask until a cell starts
        _accept_dialogs(page, report, timeout_s)
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()  # the Run menu, as a person would
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        try:
            page.wait_for_function(_RAN_SINCE, arg=before, timeout=20_000)
            break
        except Exception:  # playwright's TimeoutError: try the menu again
            continue
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        report.sliders = page.locator(".widget-slider, .jupyter-widget-slider, .widget-hslider").count()
        report.images = page.locator(".jp-OutputArea-output .widget-image, .jp-OutputArea-output img").count()
        errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'] "
                              ":text('Error')").count() + page.locator(f":text('{MODEL_NOT_FOUND}')").count()
        if report.sliders and report.images or errors and not page.evaluate(_BUSY):
            break
        time.sleep(1.0)


def _accept_dialogs(page, report: LabReport, timeout_s: float) -> None:
    """Answer any open dialog (e.g. "Select Kernel") with the Python kernel where it offers a choice."""
    for dialog in page.locator(".jp-Dialog").all():
        report.dialogs.append(dialog.inner_text()[:200])
        choice = dialog.locator("select")
        if choice.count():
            labels = [o.inner_text() for o in choice.first.locator("option").all()]
            python = next((t for t in labels if t.startswith("Python")), None)
            if python is not None:
                choice.first.select_option(label=python)
        dialog.locator(".jp-mod-accept").first.click()
        page.wait_for_selector(".jp-Dialog", state="detached", timeout=timeout_s * 1000)
