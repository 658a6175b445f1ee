#!/usr/bin/env bash
# ctest report_page_chromium: a 12-step 2-stage gpt-tiny run that evaluates every 4 steps; its
# report.html, rebuilt by `baton report DIR --report FILE` byte for byte, is loaded in headless
# Chromium: no console message (a probe page first proves that Chromium's log would show one), and
# the rendered DOM holds every panel drawn (tests/report_page_check.py). Leaves a screenshot in
# the work folder (BATON_KEEP_TEST_DIRS=1 keeps it). Skipped (77) without Chromium.
#
#   tests/report_page_chromium.sh BUILD_DIR
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: report_page_chromium.sh BUILD_DIR}" && pwd)
cd "$root" || exit 1
browser=$(command -v chromium || command -v chromium-browser) || {
  echo "chromium is not installed: skipped (apt-get install chromium)"
  exit 77
}
work=$(mktemp -d "${TMPDIR:-/tmp}/report-page.XXXXXX") || exit 1
if [ "${BATON_KEEP_TEST_DIRS:-0}" = 1 ]; then echo "keeping $work"; else trap 'rm -rf "$work"' EXIT; fi
fail() { echo "FAIL: $*"; exit 1; }

# headless Chromium on a file: $1 the page, $2 what to do (--dump-dom, --screenshot=...), stdout
# to $3, the log (stderr) to $4.
render() {
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --enable-logging=stderr --v=0 \
    --user-data-dir="$work/profile" --window-size=1200,2400 "$2" "file://$1" > "$3" 2> "$4"
}

printf '<html><body><script>console.error("baton-probe")</script></body></html>\n' > "$work/probe.html"
render "$work/probe.html" --dump-dom "$work/probe.dom" "$work/probe.log" ||
  fail "chromium could not load a probe page: $(tail -5 "$work/probe.log")"
grep -q ':CONSOLE.*baton-probe' "$work/probe.log" ||
  fail "chromium's log does not show console messages: the check below would see nothing"

steps=12
"$build/baton" run configs/gpt-tiny.yaml --set device.type=cpu --set output.dir="$work/out" \
  --set parallel.stages=2 --set train.steps=$steps --set data.eval_fraction=0.02 \
  --set train.eval_batches=1 --set train.eval_every=4 --report "$work/report.json" \
  --log-level warn > "$work/run.log" 2>&1 || { cat "$work/run.log"; fail "the run failed"; }
page="$work/out/report.html"
[ -s "$page" ] || fail "the run wrote no $page"
cp "$page" "$work/at-end.html"
"$build/baton" report "$work/out" --report "$work/report.json" > "$work/report.log" 2>&1 ||
  { cat "$work/report.log"; fail "baton report failed"; }
cmp -s "$work/at-end.html" "$page" || fail "baton report DIR --report FILE wrote another page"
# Without --report it reads the run's own report.json: the same page again.
"$build/baton" report "$work/out" > "$work/report.log" 2>&1 ||
  { cat "$work/report.log"; fail "baton report DIR failed"; }
cmp -s "$work/at-end.html" "$page" || fail "baton report DIR (its report.json) wrote another page"

render "$page" --dump-dom "$work/dom.html" "$work/chromium.log" ||
  fail "chromium failed on the page: $(tail -5 "$work/chromium.log")"
if grep -E ':CONSOLE|Uncaught' "$work/chromium.log"; then fail "console messages above"; fi
evals=$(grep -c '"eval_loss"' "$work/out/metrics.jsonl")
[ "$evals" -gt 0 ] || fail "metrics.jsonl has no eval_loss: the run did not evaluate"
python3 tests/report_page_check.py "$work/dom.html" "$steps" 2 "$evals" || exit 1

render "$page" --screenshot="$work/report.png" "$work/screenshot.out" "$work/screenshot.log" ||
  fail "chromium could not take a screenshot: $(tail -5 "$work/screenshot.log")"
[ -s "$work/report.png" ] || fail "no screenshot"
echo "ok: report.html rendered without console messages (screenshot $work/report.png)"
