"""Performance analysis from the light timing mode: real PyTorch runs with deliberate, large
effects (a data loader that sleeps, a module that sleeps), judged by relative comparisons only
(the machine is noisy)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import netparity  # noqa: E402
from netparity.analyzers.perf import analyze, compare  # noqa: E402
from netparity.cli import main  # noqa: E402
from netparity.trace import open_trace  # noqa: E402

SLEEP = 0.06  # seconds: far above the scheduling noise of a busy 2-core machine


class _Sleepy(torch.nn.Module):
    """Identity that sleeps: a module made slow on purpose."""

    def forward(self, x: Any) -> Any:
        time.sleep(SLEEP)
        return x


class _Net(torch.nn.Module):
    def __init__(self, slow: bool):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(32, 4)
        self.slow = slow
        if slow:  # only the candidate has it: the side by side must name it
            self.extra = _Sleepy()

    def forward(self, x: Any) -> Any:
        h = self.act(self.fc1(x))
        return self.fc2(self.extra(h) if self.slow else h)


class _Data(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, delay: float):
        self.delay = delay

    def __len__(self) -> int:
        return 20

    def __getitem__(self, i: int) -> Any:
        if self.delay:
            time.sleep(self.delay)
        return torch.full((16,), float(i))


def _train(path: Path, *, slow_module: bool = False, slow_data: bool = False) -> None:
    torch.manual_seed(0)
    model = _Net(slow_module)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    # 4 samples per batch: a 15 ms sleep per sample is 60 ms of loader wait per step
    loader = torch.utils.data.DataLoader(_Data(0.015 if slow_data else 0.0), batch_size=4)
    with netparity.profile(model, str(path), optimizer=opt, loader=loader) as prof:
        for x in loader:
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
    assert prof.steps == 5
    assert type(loader) is torch.utils.data.DataLoader  # the loader's class is restored
    assert not model._forward_hooks and not model.fc1._forward_pre_hooks


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("perf")
    out = {"fast": root / "fast", "slowdata": root / "slowdata", "slowmod": root / "slowmod"}
    _train(out["fast"])
    _train(out["slowdata"], slow_data=True)
    _train(out["slowmod"], slow_module=True)
    return out


def test_timing_records_cover_every_step_and_phase(runs: dict[str, Path]) -> None:
    tr = open_trace(runs["fast"])
    cols = tr.scan(["step", "op"], kind="timing")
    assert sorted(set(cols["step"].tolist())) == [0, 1, 2, 3, 4]
    ops = set(cols["op"].objects())
    assert {"step", "data", "forward", "backward", "optimizer", "other", "module"} <= ops
    r = analyze(tr)
    for row in r.steps:  # the phases never add up to more than the step they split
        assert sum(row[k] for k in ("data", "forward", "backward", "optimizer")) <= \
            row["seconds"] * 1.001
    assert r.loader["num_workers"] == 0


def test_slow_loader_is_flagged_as_data_starved_with_advice(runs: dict[str, Path]) -> None:
    r = analyze(runs["slowdata"])
    top = r.findings[0]
    assert top.kind == "data-starvation"
    assert top.share is not None and top.share > 0.3
    assert "num_workers" in top.advice and "prefetch_factor" in top.advice
    assert "pin_memory" in top.advice and "num_workers=0" in top.advice
    # a run whose steps are dominated by compute (a 60 ms module) is not data-starved (the
    # tiny "fast" run is no yardstick: collating its batch may well be 10 % of a 1 ms step)
    busy = analyze(runs["slowmod"])
    kinds = [f.kind for f in busy.findings]  # (a loaded machine may stretch its loader, but
    assert "hot-module" in kinds               # never past the 60 ms module)
    assert "data-starvation" not in kinds or \
        kinds.index("data-starvation") > kinds.index("hot-module")
    assert r.breakdown["data"] > 3 * busy.breakdown["data"]


def test_slow_module_is_the_top_hot_module(runs: dict[str, Path]) -> None:
    r = analyze(runs["slowmod"])
    assert r.modules[0].module == "extra" and r.modules[0].cls == "_Sleepy"
    # its total includes nothing else; its parent's self time excludes it
    root = next(m for m in r.modules if m.module == "")
    assert root.total >= r.modules[0].total > 3 * root.self_time
    hot = [f for f in r.findings if f.kind == "hot-module"]
    assert hot and hot[0].where == "extra"


def test_side_by_side_names_the_module_only_the_candidate_has(runs: dict[str, Path]) -> None:
    c = compare(runs["fast"], runs["slowmod"])
    # the forward phase holds the module's extra seconds too: either may come first; the
    # costliest module must be the one only the candidate has
    worst = [x for x in c.slower if x["what"] == "module"][0]
    assert worst["name"] == "extra"
    assert "forward" in [x["name"] for x in c.slower[:3]]
    assert c.modules[0]["name"] == "extra" and c.modules[0]["only"] == "cand"
    assert c.phases[0]["name"] == "forward" and c.phases[0]["extra"] > 0
    assert c.slowdown is not None  # (its size is left to the noise of a shared machine)
    assert not c  # the candidate is slower somewhere


def test_cli_json_and_chrome_outputs(runs: dict[str, Path], tmp_path: Path) -> None:
    js, ch = tmp_path / "perf.json", tmp_path / "trace.json"
    assert main(["perf", str(runs["slowdata"]), "--json", str(js), "--chrome", str(ch)]) == 0
    d = json.loads(js.read_text())
    assert {"steps", "breakdown", "first_step", "findings"} <= set(d)
    assert set(d["steps"][0]) >= {"data", "forward", "backward", "optimizer", "other"}
    assert abs(sum(d["breakdown"].values()) - 1.0) < 1e-6
    assert set(d["findings"][0]) >= {"kind", "where", "seconds", "advice"}
    with ch.open() as f:
        chrome = json.load(f)
    xs = [e for e in chrome["traceEvents"] if e["ph"] == "X"]
    assert {e["cat"] for e in xs} == {"phase", "module", "module-backward"}
    assert {"step 0", "data", "forward", "fc1"} <= {e["name"] for e in xs}
    assert all(e["dur"] > 0 and e["ts"] >= 0 for e in xs)
    js2, html = tmp_path / "side.json", tmp_path / "side.html"
    ch2 = tmp_path / "side-trace.json"
    assert main(["perf", str(runs["fast"]), str(runs["slowmod"]), "--json", str(js2),
                 "--html", str(html), "--chrome", str(ch2)]) == 0
    assert "Modules side by side" in html.read_text()
    with ch2.open() as f:
        both = json.load(f)["traceEvents"]
    assert {e["pid"] for e in both if e["ph"] == "X"} == {1, 2}  # one process per run
    assert any(e["name"] == "extra" and e["pid"] == 2 for e in both)
    assert json.loads(js2.read_text())["modules"][0]["name"] == "extra"


def test_bad_input_exits_2(runs: dict[str, Path], tmp_path: Path) -> None:
    assert main(["perf", str(tmp_path / "nothing")]) == 2
    plain = tmp_path / "plain"  # a trace without timing records
    m = torch.nn.Linear(2, 2)
    with netparity.capture(m, str(plain)) as cap:
        m(torch.ones(1, 2))
        cap.step()
    assert main(["perf", str(plain)]) == 2
    assert main(["perf", str(runs["fast"]), str(plain)]) == 2


def test_a_loader_that_cannot_be_timed_in_place_is_refused_and_leaves_no_hook(
        tmp_path: Path) -> None:
    m = torch.nn.Linear(2, 2)
    with pytest.raises(netparity.UsageError, match="prof.timed"):
        netparity.profile(m, str(tmp_path / "t"), loader=[torch.ones(1, 2)])
    assert not m._forward_hooks and not m._forward_pre_hooks
    # the same list through prof.timed(): its waits are the data phase
    with netparity.profile(m, str(tmp_path / "u")) as prof:
        for x in prof.timed([torch.ones(1, 2)] * 3):
            time.sleep(0.02)  # loop work before the forward: not the loader's wait
            m(x)
            prof.step()
    r = analyze(tmp_path / "u")
    # with the loader timed, the gap before the forward is "other", only next() is "data"
    assert len(r.steps) == 3 and all(s["other"] > 5 * s["data"] for s in r.steps[1:])


def test_zero_code_profile_of_an_unmodified_script(tmp_path: Path) -> None:
    import sys

    script = tmp_path / "train.py"
    script.write_text(
        "import time, torch\n"
        "class Slow(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        f"        time.sleep({SLEEP}); return x\n"
        "class Data(torch.utils.data.Dataset):\n"
        "    def __len__(self): return 3\n"
        "    def __getitem__(self, i):\n"
        f"        time.sleep({SLEEP}); return torch.ones(8)\n"
        "m = torch.nn.Sequential(torch.nn.Linear(8, 8), Slow(), torch.nn.ReLU())\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "time.sleep(0.2)  # set-up before the loop: not part of the first step\n"
        "for x in torch.utils.data.DataLoader(Data(), batch_size=1):\n"
        "    m(x).sum().backward(); opt.step(); opt.zero_grad()\n")
    out = tmp_path / "prof"
    assert main(["run", "--profile", "-o", str(out), "--", sys.executable, str(script)]) == 0
    r = analyze(out)
    assert len(r.steps) == 3  # one per optimizer step, found without the optimizer object
    assert r.modules[0].module == "1" and r.modules[0].cls == "Slow"
    assert all(s["optimizer"] > 0 and s["forward"] >= r.modules[0].total * 0.9
               for s in r.steps)
    # the DataLoader's waits are the data phase, the first step's too (its clock starts at
    # the wait that fetched its batch, not at the first model call nor at the script's start)
    assert all(SLEEP * 0.9 <= s["data"] < SLEEP + 0.15 for s in r.steps), r.steps
    assert r.steps[0]["other"] < 0.2, r.steps  # the set-up sleep is not in it


def test_capture_with_timing_records_both_into_one_trace(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _Net(slow=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(_Data(0.0), batch_size=4)
    with netparity.capture(model, str(tmp_path / "t"), timing=True, optimizer=opt,
                           loader=loader) as cap:
        for i, x in enumerate(loader):
            if i == 3:
                break
            model(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
            cap.step()
    tr = open_trace(tmp_path / "t")
    assert tr.count(kind="module") > 0 and tr.count(kind="timing") > 0  # accuracy and timing
    assert tr.manifest["timing"] == "light" and tr.manifest["loader"]["batch_size"] == 4
    # the timing steps are the capture's steps
    cap_steps = sorted(set(tr.scan(["step"], kind="module")["step"].tolist()))
    r = analyze(tr)
    assert [s["step"] for s in r.steps] == cap_steps == [0, 1, 2]
    assert r.modules[0].module == "extra"  # the sleeping module, capture work and all
    assert all(s["backward"] > 0 and s["optimizer"] > 0 for s in r.steps)
    assert not model._forward_hooks and type(loader) is torch.utils.data.DataLoader


def test_memory_peak_per_phase_names_the_phase_that_raised_it(tmp_path: Path) -> None:
    import subprocess
    import sys

    # a fresh process (this one's peak is whatever earlier tests left): a module touches
    # 400 MB in the forward only
    script = tmp_path / "big.py"
    script.write_text(
        "import sys, torch, netparity\n"
        "class Big(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        t = torch.ones(100_000_000)\n"
        "        return x + t[:1].sum() * 0\n"
        "m = torch.nn.Sequential(torch.nn.Linear(8, 8), Big())\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "with netparity.profile(m, sys.argv[1], optimizer=opt):\n"
        "    for _ in range(3):\n"
        "        m(torch.ones(2, 8)).sum().backward(); opt.step(); opt.zero_grad()\n")
    subprocess.run([sys.executable, str(script), str(tmp_path / "t")], check=True,
                   timeout=300)
    mem = analyze(tmp_path / "t").memory
    # Linux: the peak resident set, reset at each phase start (VmHWM / clear_refs)
    assert mem["source"] == "rss_peak"
    peak = mem["peak_allocated"]["cpu (RSS peak)"]
    # the forward's peak holds the 400 MB; backward and optimizer ran after it was freed
    assert peak["forward"] >= peak["backward"] + 380 * 2**20
    assert peak["forward"] >= peak["optimizer"] + 380 * 2**20
    assert peak["step"] == peak["forward"]
