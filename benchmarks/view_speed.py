"""How fast the network view opens, searches and expands on a 1,000-module model.

Two runs of a real PyTorch model with ~1,000 modules (a Sequential of blocks, one of which
differs) are captured (statistics), compared, and `netparity view` writes the page; headless
Chromium (Playwright) then times, in the page: the first draw, a search, expand-all, a verdict
filter and "jump to first divergence". Prints seconds per stage and the page size.

    PYTHONPATH=src python benchmarks/view_speed.py [--blocks 330]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=330, help="3 modules per block (+ root)")
    args = ap.parse_args()
    import torch
    from playwright.sync_api import sync_playwright

    import netparity
    from netparity.analyzers.divergence import compare
    from netparity.report.html import render_page
    from netparity.report.sections import Section, TreeView, sections_for
    from netparity.report.tree import compare_tree

    class Block(torch.nn.Module):
        def __init__(self, eps: float) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(16, 16)
            self.norm = torch.nn.LayerNorm(16, eps=eps)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.tanh(self.norm(self.lin(x)))

    tmp = Path(tempfile.mkdtemp(prefix="npview-"))
    try:
        for side, bad in (("ref", None), ("cand", args.blocks // 2)):
            torch.manual_seed(0)
            model = torch.nn.Sequential(*[Block(1e-2 if i == bad else 1e-5)
                                          for i in range(args.blocks)])
            n_mod = sum(1 for _ in model.modules())
            with netparity.capture(model, tmp / side) as cap:
                model(torch.randn(4, 16)).sum().backward()
                cap.step()
        t0 = time.perf_counter()
        r = compare(str(tmp / "ref"), str(tmp / "cand"))
        t1 = time.perf_counter()
        model_json = compare_tree(r)
        page = render_page([*sections_for(r, names=["verdict"]),
                            Section("view", "view", blocks=[TreeView(model_json)])])
        t2 = time.perf_counter()
        out = tmp / "view.html"
        out.write_text(page)
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        with sync_playwright() as pw:
            b = pw.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
            pg = b.new_page()
            t3 = time.perf_counter()
            pg.goto(out.as_uri())
            pg.wait_for_selector(".npv-row.sel")
            t4 = time.perf_counter()
            timed = pg.evaluate("""() => {
              const root = document.querySelector('.npv'); const T = {};
              let t = performance.now();
              const s = root.querySelector('input[type=search]'); s.value = 'norm';
              s.dispatchEvent(new Event('input')); T.search = performance.now() - t;
              s.value = ''; s.dispatchEvent(new Event('input'));
              t = performance.now(); root.querySelector('.npv-open').click();
              T.expand_all = performance.now() - t;
              T.rows = root.querySelectorAll('.npv-row').length;
              t = performance.now(); const f = root.querySelector('.npv-f[value=pass]');
              f.checked = false; f.dispatchEvent(new Event('change'));
              T.filter = performance.now() - t;
              t = performance.now(); root.querySelector('.npv-first').click();
              T.jump = performance.now() - t; return T; }""")
            b.close()
        print(f"modules: {n_mod} per side; page {len(page) / 1e6:.2f} MB")
        print(f"compare {t1 - t0:.2f} s; tree model + page {t2 - t1:.2f} s; "
              f"browser load to first divergence shown {t4 - t3:.2f} s")
        print(f"in the page: search {timed['search']:.0f} ms, expand all "
              f"{timed['expand_all']:.0f} ms ({timed['rows']} rows), filter "
              f"{timed['filter']:.0f} ms, jump {timed['jump']:.0f} ms")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
