"""One writer per trace (issue 17, items 2 and 4: two captures into one directory corrupted each
other silently; ``overwrite=True`` made a 120-step trace vanish; a user's own ``manifest.json``
was replaced; an old ``rank1/`` mixed with a new ``rank0/``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from netparity.errors import TraceError
from netparity.trace import Record, TraceWriter, open_trace
from netparity.trace.claim import ASIDE_PREFIX

from .helpers import SRC, snapshot

pytest.importorskip("torch")

# A real PyTorch capture: STEPS steps of a small model, each step tagged with the writer's
# label as the loss value so a mixed trace is visible; GO is a file both processes wait for.
CAPTURE = r"""
import os, sys, time, torch
from netparity.errors import NetparityError
from netparity.frameworks.torch.capture import capture
out, label, steps, overwrite, go, hold = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5], sys.argv[6]
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.001)
try:
    cap = capture(m, out, overwrite=overwrite)
except NetparityError as e:
    print(f"netparity: error: {e}", file=sys.stderr)
    sys.exit(2)
with cap:
    print("capturing", flush=True)
    for _ in range(steps):
        loss = m(torch.ones(2, 4)).sum()
        loss.backward()
        cap.record_loss(torch.tensor(label))
        cap.step()
        time.sleep(0.02)
    while hold and not os.path.exists(hold):  # keep the trace open until told
        time.sleep(0.01)
print("done", flush=True)
"""


def _start(out: Path, label: int, steps: int, overwrite: bool, go: Path,
           hold: Path | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=SRC)
    return subprocess.Popen([sys.executable, "-c", CAPTURE, str(out), str(label), str(steps),
                             "1" if overwrite else "0", str(go), str(hold or "")], env=env,
                            text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _consistent(out: Path) -> tuple[int, list[float]]:
    """The trace at ``out`` opens, manifest and index agree on the run, and every loss comes
    from one writer: returns (its label, the losses)."""
    tr = open_trace(out)
    losses = [float(tr.tensor(r)) if r.has_payload else float(r.stats["mean"])  # type: ignore[arg-type]
              for r in tr.records(kind="loss")]
    assert losses and len(set(losses)) == 1, losses
    assert tr.manifest["run_id"]
    return int(losses[0]), losses


@pytest.mark.parametrize("overwrite", [False, True])
def test_two_concurrent_captures_one_wins_the_other_fails_at_once(tmp_path, overwrite):
    for rnd in range(2):  # the old race lost 1 round in 5; every round must be clean
        out, go, hold = tmp_path / f"t{rnd}", tmp_path / f"go{rnd}", tmp_path / f"hold{rnd}"
        procs = [_start(out, label, 40, overwrite, go, hold) for label in (1, 2)]
        for p in procs:  # both have imported torch and wait for GO: then they race
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        go.touch()
        while all(p.poll() is None for p in procs):  # the winner holds its trace open
            time.sleep(0.01)
        hold.touch()
        results = [p.communicate(timeout=120) for p in procs]
        codes = [p.returncode for p in procs]
        assert sorted(codes) == [0, 2], (codes, results)
        loser = codes.index(2)
        err = [ln for ln in results[loser][1].splitlines() if ln.strip()]
        assert len(err) == 1 and "one writer per trace" in err[0], err
        label, losses = _consistent(out)
        assert label == 1 + codes.index(0) and len(losses) == 40


def test_a_second_capture_fails_at_once_while_the_first_runs(tmp_path):
    out, go, hold = tmp_path / "t", tmp_path / "go", tmp_path / "hold"
    go.touch()
    first = _start(out, 1, 50, False, go, hold)
    assert first.stdout is not None and first.stdout.readline().strip() == "ready"
    assert first.stdout.readline().strip() == "capturing"
    for overwrite in (False, True):  # not even --overwrite takes a live trace
        t0 = time.monotonic()
        second = _start(out, 2, 5, overwrite, go)
        _, err = second.communicate(timeout=120)
        assert second.returncode == 2, err
        assert "being written by another capture" in err and "pid" in err, err
        assert time.monotonic() - t0 < 30
    hold.touch()
    first.communicate(timeout=120)
    assert first.returncode == 0
    assert _consistent(out) == (1, [1.0] * 50)


def _write(out: Path, value: float, n: int = 3, **kw: object) -> None:
    with TraceWriter(out, **kw) as w:  # type: ignore[arg-type]
        for i in range(n):
            a = np.full(4, value, np.float32)
            w.add(Record(kind="custom", op="x", call=i, dtype="float32", shape=(4,)), payload=a)


def test_overwrite_keeps_the_old_trace_until_the_new_one_is_complete(tmp_path):
    out = tmp_path / "t"
    _write(out, 1.0)
    env = dict(os.environ, PYTHONPATH=SRC)
    # a replacing capture killed midway: the old trace is still there, moved aside intact
    script = ("import sys, time, numpy as np\n"
              "from netparity.trace import Record, TraceWriter\n"
              "w = TraceWriter(sys.argv[1], overwrite=True)\n"
              "w.add(Record(kind='custom', op='x', dtype='float32', shape=(4,)),"
              " payload=np.full(4, 2.0, np.float32)); w.flush()\n"
              "print('ready', flush=True); time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", script, str(out)], env=env, text=True,
                         stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGKILL)
    p.wait()
    asides = [d for d in out.iterdir() if d.name.startswith(ASIDE_PREFIX)]
    assert len(asides) == 1
    old = open_trace(asides[0])
    assert [float(old.tensor(r)[0]) for r in old.records()] == [1.0, 1.0, 1.0]
    # a clean replacement removes what it set aside, and only then
    _write(out, 3.0, overwrite=True)
    tr = open_trace(out)
    assert [float(tr.tensor(r)[0]) for r in tr.records()] == [3.0, 3.0, 3.0]
    assert [d.name for d in out.iterdir() if d.name.startswith(ASIDE_PREFIX)] == [asides[0].name]


def test_a_directory_netparity_did_not_write_is_refused_untouched(tmp_path):
    for name, content in (("manifest.json", '{"my": "own"}'), ("notes.txt", "mine"),
                          ("rank0/model.pt", "weights")):
        d = tmp_path / name.replace("/", "_")
        (d / name).parent.mkdir(parents=True)
        (d / name).write_text(content)
        before = snapshot(d)
        for overwrite in (False, True):
            with pytest.raises(TraceError, match="did not write"):
                TraceWriter(d, overwrite=overwrite)
            assert snapshot(d) == before and sorted(os.listdir(d)) == [name.split("/")[0]]


def test_a_stale_rank_of_an_older_run_never_mixes_in(tmp_path):
    out = tmp_path / "t"
    _write(out, 1.0, rank=1)  # an old two-rank run's rank1/
    with pytest.raises(TraceError, match="already holds a trace"):
        TraceWriter(out, rank=0)
    _write(out, 2.0, rank=0, overwrite=True)  # replaces the whole old trace, rank1 included
    tr = open_trace(out)
    assert tr.ranks == [0]
    # an index whose run id is not the manifest's is refused by the reader, naming the rank
    _write(tmp_path / "other", 9.0, rank=1)
    os.rename(tmp_path / "other" / "rank1", out / "rank1")
    with pytest.raises(TraceError, match="rank1.*another run"):
        open_trace(out)


def test_ranks_of_one_run_share_its_run_id(tmp_path):
    out = tmp_path / "t"
    w0 = TraceWriter(out, rank=0)
    w1 = TraceWriter(out, rank=1)  # joins the live run instead of refusing it
    for w in (w1, w0):
        w.add(Record(kind="custom", op="x", dtype="float32", shape=(1,)),
              payload=np.ones(1, np.float32))
        w.close()
    tr = open_trace(out)
    assert tr.ranks == [0, 1] and w0.run_id == w1.run_id == tr.manifest["run_id"]
    assert json.loads((out / "rank1" / "rank.json").read_text())["run_id"] == w0.run_id


def test_a_rank_arriving_before_rank_0_wrote_its_manifest_joins_the_run(tmp_path):
    # rank 0 has claimed the directory (its rank lock is held) but not written manifest.json
    # yet: another rank arriving in that window used to be refused ("run unknown"); a
    # 2-process DDP capture hit it
    from netparity.trace.claim import claim

    out = tmp_path / "t"
    c0 = claim(out, 0, overwrite=False)
    assert not (out / "manifest.json").exists()
    c1 = claim(out, 1, overwrite=False)
    try:
        assert c1.run_id == c0.run_id and c0.first and not c1.first
    finally:
        c1.release(clean=True)
        c0.release(clean=True)


def test_a_named_run_takes_a_late_rank(tmp_path, monkeypatch):
    out = tmp_path / "t"
    monkeypatch.setenv("NETPARITY_RUN_ID", "job-42")
    _write(out, 1.0, rank=0)  # rank 0 finished before rank 1 started
    _write(out, 2.0, rank=1)
    tr = open_trace(out)
    assert tr.ranks == [0, 1] and tr.manifest["run_id"] == "job-42"
    monkeypatch.setenv("NETPARITY_RUN_ID", "job-43")  # another run: refused, not mixed in
    with pytest.raises(TraceError, match="already holds a trace"):
        TraceWriter(out, rank=2)


def test_a_writers_temporary_renamed_mid_check_is_not_a_foreign_file(tmp_path):
    # CI, stop 26: the losing capture listed the winner's ``.manifest.json.<pid>.tmp``, the
    # winner renamed it into place, and the loser then reported the vanished name as a file
    # "netparity did not write". A thread renames temporaries into place as fast as it can
    # while the claim check runs; the check must never call the directory foreign.
    import threading

    from netparity.trace.claim import _foreign

    run = tmp_path / "t"
    (run / "rank0").mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"schema_version": 1, "netparity_version": "0"}))
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            tmp, rtmp = run / f".manifest.json.{i}.tmp", run / "rank0" / f".rank.json.{i}.tmp"
            tmp.write_text(json.dumps({"schema_version": 1, "netparity_version": "0", "i": i}))
            rtmp.write_text("{}")
            os.replace(tmp, run / "manifest.json")
            os.replace(rtmp, run / "rank0" / "rank.json")

    t = threading.Thread(target=writer)
    t.start()
    try:
        found = {_foreign(run) for _ in range(3000)}
    finally:
        stop.set()
        t.join()
    assert found == {None}, found
