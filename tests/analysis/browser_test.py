#!/usr/bin/env python3
"""The HTML report in a real browser: Debian's headless Chromium loads `rotary report`'s page.

Checks:
  - the page loads with no console errors (Chromium's --enable-logging=stderr prints every
    console message as "CONSOLE(...)"; an error-level one fails the test);
  - every plot has rendered: in the DOM Chromium built, every <svg> holds drawn elements
    (polyline, rect, circle, path or line);
  - every text of every plot (titles, ticks, axis labels, legends) lies inside its plot as the
    browser laid it out, and no two legend entries overlap: a copy of the page with a measuring
    script (the report itself has none) writes each text's box from getBBox() into the DOM;
  - the page says what made it (version, date, command line) and links its docs;
  - the screenshot is not blank: a decoded PNG with a substantial share of non-white pixels
    and many distinct colours.

Usage: browser_test.py ROTARY_COMMAND OUTPUT_DIR. Uses only the standard library.
"""
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--no-first-run", "--hide-scrollbars"]


def fail(message):
    print("FAIL: " + message)
    print("0 passed, 1 failed")
    sys.exit(1)


def decode_png(path):
    """Returns (width, height, channels, rows of bytes) of an 8-bit RGB/RGBA, non-interlaced PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path} is not a PNG")
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or color not in (2, 6) or interlace != 0:
                fail(f"unexpected PNG format depth={depth} color={color} interlace={interlace}")
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        line = raw[y * (stride + 1):(y + 1) * (stride + 1)]
        kind, row = line[0], bytearray(line[1:])
        for x in range(stride):  # PNG filters (RFC 2083, section 6)
            left = row[x - channels] if x >= channels else 0
            up = previous[x]
            up_left = previous[x - channels] if x >= channels else 0
            if kind == 1:
                row[x] = (row[x] + left) & 255
            elif kind == 2:
                row[x] = (row[x] + up) & 255
            elif kind == 3:
                row[x] = (row[x] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                predictor = left if pa <= pb and pa <= pc else (up if pb <= pc else up_left)
                row[x] = (row[x] + predictor) & 255
        rows.append(bytes(row))
        previous = row
    return width, height, channels, rows


# Measures every <text> of every plot after layout (getBBox in the SVG's user units, which are
# its viewBox units) and writes one line per problem into <pre id="layout-check">.
MEASURE_SCRIPT = """<script>
window.addEventListener('load', () => {
  const lines = [];
  let texts = 0;
  document.querySelectorAll('svg.plot').forEach((svg, index) => {
    const box = svg.viewBox.baseVal;
    const title = svg.querySelector('title').textContent;
    const legends = [];
    svg.querySelectorAll('text').forEach((text) => {
      texts += 1;
      // getBBox is in the text's own coordinates: apply its transform (the rotated axis labels).
      const raw = text.getBBox();
      const local = text.transform.baseVal.consolidate();
      let b = raw;
      if (local) {
        const m = local.matrix;
        const xs = [], ys = [];
        for (const [x, y] of [[raw.x, raw.y], [raw.x + raw.width, raw.y], [raw.x, raw.y + raw.height],
                              [raw.x + raw.width, raw.y + raw.height]]) {
          xs.push(m.a * x + m.c * y + m.e);
          ys.push(m.b * x + m.d * y + m.f);
        }
        b = {x: Math.min(...xs), y: Math.min(...ys), width: Math.max(...xs) - Math.min(...xs),
             height: Math.max(...ys) - Math.min(...ys)};
      }
      if (b.x < box.x - 1 || b.y < box.y - 1 || b.x + b.width > box.x + box.width + 1 ||
          b.y + b.height > box.y + box.height + 1) {
        lines.push(`plot ${index} (${title}): "${text.textContent}" at x ${b.x.toFixed(1)}..${(b.x + b.width).toFixed(1)}` +
                   `, y ${b.y.toFixed(1)}..${(b.y + b.height).toFixed(1)} leaves the plot's ${box.width} x ${box.height}`);
      }
      if (text.classList.contains('legend')) legends.push([text.textContent, b]);
    });
    for (let i = 0; i < legends.length; ++i) {
      for (let j = i + 1; j < legends.length; ++j) {
        const [s, a] = legends[i], [t, c] = legends[j];
        if (a.x < c.x + c.width && c.x < a.x + a.width && a.y < c.y + c.height - 1 && c.y < a.y + a.height - 1) {
          lines.push(`plot ${index} (${title}): legend "${s}" overlaps "${t}"`);
        }
      }
    }
  });
  const pre = document.createElement('pre');
  pre.id = 'layout-check';
  pre.textContent = [`checked ${texts} texts`].concat(lines).join('\\n');
  document.body.appendChild(pre);
});
</script>
"""


def main():
    if len(sys.argv) != 3:
        fail("usage: browser_test.py ROTARY_COMMAND OUTPUT_DIR")
    rotary, out_dir = sys.argv[1], sys.argv[2]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        fail("chromium is not installed (scripts/install-deps.sh installs Debian's chromium)")
    os.makedirs(out_dir, exist_ok=True)
    page = os.path.join(out_dir, "browser_test_report.html")
    shot = os.path.join(out_dir, "browser_test_report.png")
    subprocess.run([rotary, "report", "--compare", "llama-3.1-8b,qwen2.5-7b-yarn", "-o", page],
                   check=True, capture_output=True, timeout=120)
    url = "file://" + os.path.abspath(page)

    # The DOM the browser built, and its console.
    dom_run = subprocess.run([chromium, *CHROMIUM_FLAGS, "--enable-logging=stderr", "--v=0",
                              "--virtual-time-budget=2000", "--dump-dom", url],
                             capture_output=True, text=True, timeout=120)
    if dom_run.returncode != 0:
        fail(f"chromium --dump-dom exited {dom_run.returncode}: {dom_run.stderr[-500:]}")
    console_errors = [line for line in dom_run.stderr.splitlines()
                      if "CONSOLE" in line and ("ERROR" in line or ":ERROR:" in line)]
    if console_errors:
        fail("console errors: " + " | ".join(console_errors[:5]))
    svgs = re.findall(r"<svg\b.*?</svg>", dom_run.stdout, flags=re.S)
    if len(svgs) < 8:
        fail(f"expected at least 8 plots in the rendered page, found {len(svgs)}")
    empty = [i for i, svg in enumerate(svgs) if not re.search(r"<(polyline|rect|circle|path|line)\b", svg)]
    if empty:
        fail(f"plots with nothing drawn: {empty}")

    # The layout as the browser measured it: every text inside its SVG's viewBox, legends apart.
    measured = os.path.join(out_dir, "browser_test_layout.html")
    with open(page, encoding="utf-8") as source:
        html = source.read()
    with open(measured, "w", encoding="utf-8") as copy:
        copy.write(html.replace("</body>", MEASURE_SCRIPT + "</body>"))
    layout_run = subprocess.run([chromium, *CHROMIUM_FLAGS, "--virtual-time-budget=2000", "--dump-dom",
                                 "file://" + os.path.abspath(measured)], capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="layout-check">(.*?)</pre>', layout_run.stdout, flags=re.S)
    if found is None:
        fail("the layout check did not run (no #layout-check in the DOM)")
    problems = [line for line in found.group(1).strip().splitlines() if line]
    checked = problems.pop(0) if problems and problems[0].startswith("checked") else "checked ?"
    if problems:
        fail(f"{len(problems)} layout problems ({checked}): " + " | ".join(problems[:6]))
    if 'class="provenance">Made by rotary ' not in dom_run.stdout or "<code>rotary report --compare" not in dom_run.stdout:
        fail("the page does not say what made it (version, date and command line)")
    # The docs by their path in the repository, never a file:// link into the tree that made the
    # page (it breaks once the page is moved or sent).
    if "file://" in dom_run.stdout:
        fail("the page holds a file:// address")
    if "docs/analysis.md" not in dom_run.stdout:
        fail("the page does not name docs/analysis.md")

    # The screenshot: decoded and looked at.
    shot_run = subprocess.run([chromium, *CHROMIUM_FLAGS, "--window-size=1400,2400",
                               "--virtual-time-budget=2000", f"--screenshot={shot}", url],
                              capture_output=True, text=True, timeout=120)
    if shot_run.returncode != 0 or not os.path.exists(shot):
        fail(f"chromium --screenshot failed ({shot_run.returncode}): {shot_run.stderr[-500:]}")
    width, height, channels, rows = decode_png(shot)
    non_white, colours = 0, set()
    for row in rows[::4]:
        for x in range(0, width * channels, channels * 4):
            pixel = row[x:x + 3]
            colours.add(pixel)
            if min(pixel) < 235:
                non_white += 1
    sampled = len(rows[::4]) * len(range(0, width * channels, channels * 4))
    share = non_white / sampled
    if share < 0.02 or len(colours) < 50:
        fail(f"the screenshot looks blank: {share:.1%} non-white pixels, {len(colours)} colours")
    print(f"ok: {len(svgs)} plots rendered with drawn elements, no console errors, screenshot "
          f"{width}x{height} with {share:.1%} non-white pixels and {len(colours)} colours ({shot})")
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main()
