"""The network view (`netparity view`, and the same view in the compare and step reports):
both module trees side by side, coloured by verdict, on real captures of two ranks, checked in
the model and in a real browser (headless Chromium driven by Playwright)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import netparity  # noqa: E402
from netparity.analyzers.divergence import compare  # noqa: E402
from netparity.report.tree import compare_tree  # noqa: E402

EVIL = "x</script><img src=q onerror=\"document['title']='pwned'\">"


class Block(torch.nn.Module):
    def __init__(self, eps: float) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.norm(self.lin(x)))


class Net(torch.nn.Module):
    def __init__(self, bad_eps: float | None) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(*[Block(bad_eps if (bad_eps and i == 2) else 1e-5)
                                            for i in range(4)])
        self.add_module(EVIL, torch.nn.Identity())  # a hostile module name reaches the page
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(getattr(self, EVIL)(self.blocks(x)))


def _capture(path: Path, rank: int, bad: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("NETPARITY_RUN_ID", f"view-{path.name}")
    torch.manual_seed(0)
    model = Net(1e-2 if bad else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(6, 8), torch.randint(0, 3, (6,))
    with netparity.capture(model, path, payload="tensors", optimizer=opt) as cap:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        cap.step()


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two 2-rank runs; rank 1 of the candidate has LayerNorm eps 1e-2 in blocks.2."""
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("view")
    try:
        for rank in (0, 1):
            _capture(root / "ref", rank, False, mp)
            _capture(root / "cand", rank, rank == 1, mp)
    finally:
        mp.undo()
    return root / "ref", root / "cand"


def test_the_model_colours_the_culprit_on_its_rank_only(traces: tuple[Path, Path]) -> None:
    ref, cand = traces
    results = [compare(str(ref), str(cand), rank=r) for r in (0, 1)]
    m = compare_tree(*results)
    assert m["ranks"] == ["0", "1"]
    node = {n["ref"]: n for n in m["nodes"]}
    norm = node["blocks.2.norm"]
    assert norm["r"]["1"]["forward"]["s"] == "fail" and \
        norm["r"]["1"]["forward"]["o"] == "introduced"
    assert norm["r"]["0"]["forward"]["s"] == "pass"
    # blocks before it agree on both ranks; the ones after only carry it
    assert node["blocks.1.norm"]["r"]["1"]["forward"]["s"] == "pass"
    assert node["blocks.3.lin"]["r"]["1"]["forward"].get("o") != "introduced"
    assert node["blocks.2"]["parent"] == node["blocks"]["id"]
    assert m["first"]["id"] == norm["id"] and m["first"]["rank"] == "1"
    assert m["summary"]["0"]["status"] == "pass" and "blocks.2.norm" in m["summary"]["1"]["first"]
    # a parameter's gradient and update count for its module
    assert norm["r"]["1"]["backward"]["s"] in ("fail", "warn")


def _browser():  # type: ignore[no-untyped-def]
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("chromium is not on PATH (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    return exe, sync_api


@pytest.mark.browser
def test_view_in_a_real_browser(traces: tuple[Path, Path], tmp_path: Path) -> None:
    exe, sync_api = _browser()
    ref, cand = traces
    out = tmp_path / "view.html"
    p = subprocess.run([sys.executable, "-m", "netparity", "view", str(ref), str(cand),
                        "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and "FAIL" in p.stdout and "on 2 ranks" in p.stdout, p.stderr
    html = out.read_text()
    assert "<img src=q" not in html  # the hostile name only as escaped JSON
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
        page = b.new_page(viewport={"width": 1300, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(out.as_uri())
        rows = page.locator(".npv-row")

        def names() -> list[str]:  # the reference's full paths of the rows shown
            return page.eval_on_selector_all(
                ".npv-row", "rs => rs.map(r => r.querySelector('.npv-name').title"
                ".split(' \u2014 ')[0])")

        def row(path: str):  # type: ignore[no-untyped-def]
            return page.locator(f'.npv-row:has(.npv-name[title^="{path} \u2014"])').first

        # opened on the first divergence: its row selected, its evidence in the panel
        assert page.inner_text(".npv-detail h4").startswith("blocks.2.norm")
        sel = page.locator(".npv-row.sel")
        assert "c-bg-introduced" in (sel.get_attribute("class") or "")
        assert "introduced here" in page.inner_text(".npv-detail")
        assert page.locator(".npv-rank").input_value() == "1"
        # the hostile module name is text, not markup
        assert page.title() != "pwned" and page.locator(".npv img").count() == 0
        assert any(EVIL in n for n in names())
        # collapse: the container shows what is inside it
        page.click(".npv-close")
        blocks = row("blocks")
        assert blocks.locator(".npv-dot.c-introduced").count() == 1
        # search: only matches and their ancestors
        page.fill(".npv-bar input[type=search]", "norm")
        shown = names()
        assert "blocks.2.norm" in shown and all("norm" in n or n in ("(root)", "blocks")
                                                or n.startswith("blocks.") for n in shown)
        assert not any(n.endswith(".lin") for n in shown)
        page.fill(".npv-bar input[type=search]", "")
        # filter by verdict: hide passing modules
        page.select_option(".npv-dir", "forward")  # (backward: everything before it carries it)
        page.click(".npv-open")
        before = rows.count()
        page.uncheck(".npv-f[value=pass]")
        # (a passing container stays as the context of what fails inside it)
        assert rows.count() < before and all(
            t.strip().startswith("\u25be") for t in
            page.locator(".npv-row.c-bg-pass").all_inner_texts())
        assert "blocks.0.lin" not in names() and "blocks.2.norm" in names()
        page.check(".npv-f[value=pass]")
        page.select_option(".npv-dir", "all")
        # the other rank: everything agrees there
        page.select_option(".npv-rank", "0")
        page.click(".npv-open")
        norm_row = row("blocks.2.norm")
        assert "c-bg-pass" in (norm_row.get_attribute("class") or "")
        # the per-rank strip names rank 1's first divergence
        assert "blocks.2.norm" in (page.locator(".npv-chip").nth(1).get_attribute("title") or "")
        # click another node: its evidence; then jump back to the first divergence
        row("blocks.0.lin").click()
        assert page.inner_text(".npv-detail h4").startswith("blocks.0.lin")
        page.click(".npv-first")
        assert page.locator(".npv-rank").input_value() == "1"
        assert page.inner_text(".npv-detail h4").startswith("blocks.2.norm")
        # direction filter: the update of blocks.2.norm's parameters
        page.select_option(".npv-dir", "update")
        assert "update" in page.inner_text(".npv-detail")
        assert errors == []
        b.close()


def test_view_of_a_saved_result_and_bad_input(traces: tuple[Path, Path],
                                              tmp_path: Path) -> None:
    ref, cand = traces
    saved = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "netparity", "compare", str(ref), str(cand),
                        "--rank", "1", "--json", str(saved), "-q"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr
    out = tmp_path / "v.html"
    p = subprocess.run([sys.executable, "-m", "netparity", "view", str(saved), "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and out.is_file(), p.stderr
    model = json.loads(out.read_text().split("class='npv-data'>", 1)[1].split("</script>")[0])
    assert model["nodes"][model["first"]["id"]]["ref"] == "blocks.2.norm"
    for argv in (["view", str(ref)], ["view", str(tmp_path / "missing.json")],
                 ["view", str(out)]):
        bad = subprocess.run([sys.executable, "-m", "netparity", *argv, "-o",
                              str(tmp_path / "x.html")], capture_output=True, text=True,
                             timeout=120)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1


def _nan_run(tmp_path: Path) -> Path:
    """A full op-level capture of a script whose module `scale` divides by a zero std at
    step 1 (0/0 in the forward)."""
    script = tmp_path / "nan.py"
    script.write_text(
        "import torch\n"
        "class Scale(torch.nn.Module):\n"
        "    def forward(self, h):\n"
        "        return h / h.std(dim=0, keepdim=True)\n"
        "torch.manual_seed(0)\n"
        "m = torch.nn.Sequential(torch.nn.Linear(4, 4), Scale(), torch.nn.Linear(4, 2))\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for s in range(2):\n"
        "    x = torch.randn(3, 4) if s == 0 else torch.ones(3, 4)\n"
        "    m(x).square().mean().backward(); opt.step(); opt.zero_grad()\n")
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "netparity", "run", "-o", str(out), "--level",
                        "both", "--", sys.executable, str(script)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return out


def test_numerics_and_perf_reports_use_the_same_tree(tmp_path: Path) -> None:
    from netparity.analyzers.numerics import analyze as numerics
    from netparity.report.tree import numerics_tree

    r = numerics(_nan_run(tmp_path))
    m = numerics_tree(r, r.modules)
    first = m["nodes"][m["first"]["id"]]
    # the division inside module `1` (Scale) made the NaN; its parent is that module
    assert first["type"] == "op" and "div" in first["ref"]
    assert m["nodes"][first["parent"]]["ref"] == "1"
    assert first["r"]["0"]["forward"]["nf"] and first["r"]["0"]["forward"]["steps"] == [1]
    carried = {n["ref"] for n in m["nodes"] if any(
        e.get("o") == "propagated" for e in n["r"].get("0", {}).values())}
    assert "2" in carried  # the next Linear carries it on
    html = tmp_path / "n.html"
    p = subprocess.run([sys.executable, "-m", "netparity", "numerics", str(tmp_path / "run"),
                        "--html", str(html)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and "class='npv'" in html.read_text()
