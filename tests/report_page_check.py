#!/usr/bin/env python3
"""Checks the DOM that headless Chromium rendered from a run's report.html (--dump-dom): every
panel's <svg> is there and drawn, with one curve point per step, eval markers, a bar segment per
stage and category, both timelines, and the config.

  tests/report_page_check.py DOM_FILE STEPS STAGES EVALS

Exit 0 when every check holds; otherwise the first failure on stderr, exit 1.
"""
import sys
from html.parser import HTMLParser


class Page(HTMLParser):
    """Collects, per top-level <svg> (by id, or timeline-N inside the timeline section), the
    elements drawn in it, and the text of the sections."""

    def __init__(self):
        super().__init__()
        self.svgs = {}  # id -> {"polyline": [points...], "circle": n, "bar": [...], "rect": n}
        self.current = None
        self.depth = 0
        self.section = None
        self.timelines = 0
        self.text = {}  # section id -> text

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.section = attrs.get("id")
        if tag == "svg":
            if self.depth == 0:
                name = attrs.get("id")
                if self.section == "timeline":
                    name = f"timeline-{self.timelines}"
                    self.timelines += 1
                self.current = {"polyline": [], "circle": 0, "bar": [], "rect": 0, "text": 0}
                self.svgs[name] = self.current
            self.depth += 1
            return
        if self.depth == 0:
            return
        if tag == "polyline":
            self.current["polyline"].append(
                (attrs.get("data-label", ""), len(attrs.get("points", "").split())))
        elif tag == "circle":
            self.current["circle"] += 1
        elif tag == "rect":
            self.current["rect"] += 1
            if attrs.get("class") == "bar":
                self.current["bar"].append((attrs["data-group"], attrs["data-bar"],
                                            attrs["data-category"], float(attrs["height"])))
        elif tag == "text":
            self.current["text"] += 1

    def handle_endtag(self, tag):
        if tag == "svg" and self.depth > 0:
            self.depth -= 1
        if tag == "section":
            self.section = None

    def handle_data(self, data):
        if self.section:
            self.text[self.section] = self.text.get(self.section, "") + data


def fail(message):
    sys.exit(f"FAIL: {message}")


def main(dom_file, steps, stages, evals):
    page = Page()
    with open(dom_file, encoding="utf-8") as f:
        page.feed(f.read())
    for panel in ("curves", "memory", "timeline", "config"):
        if "not yet written" in page.text.get(panel, "") or "not given" in page.text.get(panel, ""):
            fail(f"panel {panel} says its file is missing: {page.text[panel][:200]!r}")
    for plot, label in (("plot-loss", "loss"), ("plot-lr", "lr"), ("plot-grad-norm", "grad norm"),
                        ("plot-tokens-per-s", "tokens/s")):
        svg = page.svgs.get(plot)
        if svg is None:
            fail(f"no <svg id={plot}> in the rendered page")
        lines = dict(svg["polyline"])
        if lines.get(label) != steps:
            fail(f"{plot}: series {label!r} has {lines.get(label)} points, expected {steps}")
        if svg["text"] < 6:
            fail(f"{plot}: {svg['text']} text elements: no axis labels and ticks")
    loss = page.svgs["plot-loss"]
    if dict(loss["polyline"]).get("eval loss") != evals or loss["circle"] != evals:
        fail(f"plot-loss: eval loss {loss['polyline']}, {loss['circle']} markers, expected {evals}")
    bars = page.svgs.get("plot-memory", {"bar": []})["bar"]
    groups = {b[0] for b in bars}
    if len(groups) != stages:
        fail(f"plot-memory: bars for {sorted(groups)}, expected {stages} stages")
    for group in groups:
        for kind in ("measured", "predicted"):
            drawn = [b for b in bars if b[0] == group and b[1] == kind and b[3] > 0]
            if not drawn:
                fail(f"plot-memory: {group} has no {kind} bar")
            if "params" not in {b[2] for b in drawn}:
                fail(f"plot-memory: {group} {kind} has no params segment")
    for name in ("timeline-0", "timeline-1"):
        if page.svgs.get(name, {"rect": 0})["rect"] < 2 * stages:
            fail(f"{name}: not drawn ({page.svgs.get(name)})")
    if "gpt" not in page.text.get("config", ""):
        fail("the config panel does not hold the config")
    print(f"report.html as Chromium rendered it: {len(page.svgs)} SVGs; curves of {steps} steps, "
          f"{evals} eval points, {len(bars)} memory segments over {stages} stages, 2 timelines")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
