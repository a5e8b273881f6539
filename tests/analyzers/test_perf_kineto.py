"""``netparity perf`` on ``torch.profiler`` (Kineto) traces: a real fp32 run against a real
bf16-autocast run of the same model on CPU; the conversion ops autocast adds are counted."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch.profiler import ProfilerActivity, profile, schedule  # noqa: E402

from netparity.analyzers.perf import analyze, compare  # noqa: E402
from netparity.cli import main  # noqa: E402

LINEARS = 3
BATCH = 16
DATA_SLEEP = 0.03  # seconds per batch in the fp32 run's loader: a data phase to find


class _Data(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, delay: float):
        self.delay = delay

    def __len__(self) -> int:
        return BATCH * 6

    def __getitem__(self, i: int) -> Any:
        if self.delay and i % BATCH == 0:
            time.sleep(self.delay)
        return torch.full((32,), float(i % 7)), i % 10


def _run(out: Path, *, bf16: bool, handler: bool) -> Path:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(_Data(0.0 if bf16 else DATA_SLEEP), batch_size=BATCH)
    target = out / "trace.json"
    ready = (torch.profiler.tensorboard_trace_handler(str(out)) if handler
             else (lambda p: p.export_chrome_trace(str(target))))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True,
                 schedule=schedule(wait=0, warmup=1, active=4, repeat=1),
                 on_trace_ready=ready) as prof:
        for x, y in loader:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    return out if handler else target


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kineto")
    (root / "bf16").mkdir()
    return {"fp32": _run(root, bf16=False, handler=False),
            "bf16": _run(root / "bf16", bf16=True, handler=True)}  # a tensorboard directory


def test_step_breakdown_from_profiler_steps(runs: dict[str, Path]) -> None:
    r = analyze(runs["fp32"])
    assert r.source == "kineto" and [s["step"] for s in r.steps] == [1, 2, 3, 4]
    for s in r.steps:
        assert s["forward"] > 0 and s["backward"] > 0 and s["optimizer"] > 0
        assert sum(s[k] for k in ("data", "forward", "backward", "optimizer")) <= \
            s["seconds"] * 1.001
        assert s["data"] >= DATA_SLEEP * 0.9  # the loader's sleep, inside its annotation
    # (whether it is a finding depends on how slow this machine's ops are today)
    # hot ops carry their dtypes and the shapes record_shapes gave
    mm = [o for o in r.ops if o.op == "aten::addmm"]
    assert mm and all(o.dtypes.startswith("float32") for o in mm)
    assert any(f"{BATCH}x32" in o.shapes for o in mm)
    # memory per phase from profile_memory's events (CPU allocator)
    peaks = r.memory["peak_allocated"]["cpu"]
    assert peaks["forward"] > 0 and peaks["backward"] > 0
    assert r.device == {} and not any(f.kind == "device-idle" for f in r.findings)  # no GPU


def test_bf16_autocast_conversions_are_counted_against_fp32(runs: dict[str, Path]) -> None:
    ref, cand = analyze(runs["fp32"]), analyze(runs["bf16"])
    assert ref.conversions["per_step"]["cast"]["count"] == 0  # fp32 throughout: no cast
    casts = cand.conversions["per_step"]["cast"]
    # autocast casts each Linear's weight, bias and input to bf16 on every forward
    assert casts["count"] >= 3 * LINEARS and casts["seconds"] > 0
    top = cand.conversions["ops"][0]
    assert top["kind"] == "cast" and top["op"] == "aten::_to_copy"
    assert all(o.dtypes.startswith("bfloat16") for o in cand.ops if o.op == "aten::addmm")
    conv = [f for f in cand.findings if f.kind == "conversion"]
    assert not conv or "bfloat16" in conv[0].advice
    c = compare(runs["fp32"], runs["bf16"])
    to_copy = next(o for o in c.ops if o["name"] == "aten::_to_copy")
    assert to_copy["ref_calls"] == 0 and to_copy["cand_calls"] >= 3 * LINEARS
    assert to_copy["extra"] > 0 and any(x["what"] == "op" for x in c.slower)


def test_cli_reads_profiler_traces_and_refuses_bad_ones(runs: dict[str, Path],
                                                        tmp_path: Path) -> None:
    js = tmp_path / "side.json"
    assert main(["perf", str(runs["fp32"]), str(runs["bf16"]), "--json", str(js),
                 "--html", str(tmp_path / "side.html")]) == 0
    d = json.loads(js.read_text())
    assert d["conversions"]["cand"] >= d["conversions"]["ref"] + 3 * LINEARS  # the casts
    one = tmp_path / "one.json"
    assert main(["perf", str(runs["bf16"]), "--json", str(one)]) == 0
    d1 = json.loads(one.read_text())
    assert {"steps", "breakdown", "first_step", "findings", "ops", "conversions",
            "memory"} <= set(d1)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["perf", str(bad)]) == 2
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}')
    assert main(["perf", str(other)]) == 2


def test_op_classes_side_by_side_fp32_vs_bf16(runs: dict[str, Path]) -> None:
    ref, cand = analyze(runs["fp32"]), analyze(runs["bf16"])
    for r in (ref, cand):
        # the classes split the ops' self time: nothing lost, nothing counted twice
        assert sum(v["self"] for v in r.op_classes.values()) == \
            pytest.approx(sum(o.self_time for o in r.ops), rel=1e-6)
        assert sum(v["calls"] for v in r.op_classes.values()) == \
            pytest.approx(sum(o.calls for o in r.ops), rel=1e-6)
        # the Linears' addmm/mm, the SGD step (inside its Optimizer.step annotation)
        assert r.op_classes["matmul-linear"]["calls"] >= 2 * LINEARS  # forward and backward
        assert r.op_classes["optimizer"]["self"] > 0
        assert r.op_classes["activation"]["calls"] >= 2  # ReLU (and its backward)
    c = compare(runs["fp32"], runs["bf16"])
    assert [x["extra"] for x in c.classes] == sorted((x["extra"] for x in c.classes),
                                                     reverse=True)
    conv = next(x for x in c.classes if x["name"] == "data movement & conversion")
    # autocast's casts (weight, bias and input of each Linear, with their copies inside)
    assert conv["cand_calls"] >= conv["ref_calls"] + 3 * LINEARS
    # (its time: a few microseconds per cast on this small model, within the noise of the
    # reference's own data movement, the collate's stack included: not asserted)
    assert {x["name"] for x in c.slower if x["what"] == "op class"} == \
        {x["name"] for x in c.classes if x["extra"] > 0}
    assert c.to_json()["classes"] == c.classes


def test_reading_a_profiler_trace_reports_its_stages(runs: dict[str, Path]) -> None:
    """A profiler trace of a long run is hundreds of MB (183 MB took 66 s with nothing on
    the screen): reading, parsing and summarising are reported as they start."""
    from netparity.analyzers.perf import analyze as perf_analyze
    from netparity.report.progress import Progress

    class Seen(Progress):
        def __init__(self) -> None:
            self.stages: list[str] = []

        def stage(self, name: str, total: int | None = None) -> None:
            self.stages.append(name)

    seen = Seen()
    r = perf_analyze(runs["fp32"], progress=seen)
    assert r.steps
    assert [s.split()[0] for s in seen.stages] == ["reading", "parsing", "summarising"]
    assert "MiB" in seen.stages[1] and "events" in seen.stages[2]
